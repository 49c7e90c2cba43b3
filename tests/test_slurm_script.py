"""The sbatch script, read as a cluster would run it: one node, every step told the discovery, each its share.

Constructed step lists (deploy/live_plan.py's LiveProcess) through the real renderer; the script is then parsed by
bash. The script run on a cluster, with mocker workers, is in test_rehearsal.py.
"""

import subprocess

import pytest

from spica_lib.deploy.live_plan import ENGINE_PORTS, STEP_ENV, WORKER_PORTS, LiveProcess
from spica_lib.deploy.slurm_script import SlurmOptions, TrafficStep, one_node, slurm_script

TRAFFIC = TrafficStep(argv=["aiperf", "profile", "--url", "http://$HEAD:$PORT"], check=["aiperf", "--version"],
                      check_fails="AIPerf is missing")  # fmt: skip


def steps(backend: str, workers: int = 2, gpus: int = 1) -> list[LiveProcess]:
    frontend = LiveProcess(name="frontend", role="frontend", argv=["python3", "-m", "dynamo.frontend", "--http-port",
                                                                   "{http_port}"])  # fmt: skip
    ports = [*WORKER_PORTS, *ENGINE_PORTS[backend]]
    return [frontend, *(LiveProcess(name=f"agg-{i}", role="agg", argv=["bash", "-c", 'exec python3 -m x "$@"'],
                                    workers=1, gpus_per_worker=gpus, env={"NCCL_CUMEM_ENABLE": "1"}, port_env=ports,
                                    script='exec python3 -m x "$@"') for i in range(workers))]  # fmt: skip


def script(backend: str = "sglang", **options) -> str:
    return slurm_script(name="d", about=["a"], processes=steps(backend), gpus_per_node=8,
                        options=SlurmOptions(python_env="/opt/env", **options), model="m/n", fetch="m/n",
                        traffic=TRAFFIC, engine="engine")  # fmt: skip


def test_every_step_is_told_the_discovery_and_planes_by_environment_never_on_its_command_line():
    text = script()
    exports = text.index("export " + " ".join(f"{k}={v}" for k, v in STEP_ENV.items()))
    assert exports < text.index("start_step frontend") and 'export DYN_FILE_KV="$HERE/discovery-$SLURM_JOB_ID"' in text
    assert "--discovery-backend" not in text and "--event-plane" not in text


def test_each_step_gets_its_share_of_one_whole_node_and_a_step_without_gpus_asks_for_none():
    text = script()
    for line in ("#SBATCH --nodes=1", "#SBATCH --exclusive", "#SBATCH --mem=0", "#SBATCH --gpus-per-node=2"):
        assert line in text.splitlines() or any(l.startswith(line + " ") for l in text.splitlines()), line
    assert "ONE=(--exact --cpus-per-task=$((CPUS / STEPS))" in text and "STEPS=4" in text  # frontend, 2, traffic
    assert 'srun --nodes=1 --ntasks=1 "${ONE[@]}" --gpus-per-node="$gpus"' in text
    assert "start_step frontend frontend 0" in text and "start_step agg-0 backend 1" in text
    assert text.count('--gpus-per-node=0 "${LAUNCH[@]}"') == 3  # the check, the fetch, the traffic


def test_each_worker_has_ports_of_its_own_and_only_its_engine_s_variables():
    sglang, vllm = script("sglang"), script("vllm")
    assert "VLLM_NIXL_SIDE_CHANNEL_PORT" not in sglang and sglang.count("free_port DYN_TCP_RPC_PORT") == 2
    assert vllm.count("free_port VLLM_NIXL_SIDE_CHANNEL_PORT") == 2 and '"DYN_VLLM_KV_EVENT_PORT=$DYN_VLLM_KV_EVENT_PORT"' in vllm
    assert "NCCL_CUMEM_ENABLE=1" in sglang  # the DGD container's own env
    assert "PORT=$((20000" not in sglang and "% 4000" not in sglang  # not from the job id: free when the job starts


def test_the_script_checks_what_fails_late_up_front_and_bash_parses_it(tmp_path):
    text = script(partition="gpu", time="30")
    assert text.index("aiperf --version") < text.index("snapshot_download") < text.index("start_step frontend")
    assert 'export HF_HOME="${SPICA_MODEL_CACHE:-$HERE/model-cache}"' in text
    path = tmp_path / "deploy.sbatch"
    path.write_text(text)
    assert subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True).returncode == 0


def test_a_deployment_one_node_cannot_hold_is_refused_with_the_reason():
    with pytest.raises(ValueError, match=r"needs 12 GPUs and a node has 8 .* file discovery .* network file system"):
        one_node(steps("sglang", workers=3, gpus=4), 8)
    assert one_node(steps("sglang", workers=2, gpus=4), 8) == 8
