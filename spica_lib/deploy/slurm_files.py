"""`deploy/<rank>/slurm/`: the deployment as an sbatch script for a SLURM cluster, beside its Kubernetes files.

`deploy.sbatch` starts the DGD's own frontend and worker commands (deploy/live_plan.py) as `srun` steps
(deploy/slurm_script.py), then runs AIPerf against it with the traffic the trial was replayed on (the same
argv as the Kubernetes benchmark Job, deploy/bench_job.py; a trace is copied beside the script). `README.md`
says how to submit it and what it assumes.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from spica_lib.base.artifacts import atomic_write_text
from spica_lib.deploy.bench_job import AIPERF, aiperf_argv
from spica_lib.deploy.live_plan import engine_processes, frontend_process
from spica_lib.deploy.slurm_script import SlurmOptions, slurm_script
from spica_lib.facts.hardware import system_facts
from spica_lib.replay.plan import role_sku
from spica_lib.trial.describe import describe
from spica_lib.trial.spec import TrialRecord

SCRIPT = "deploy.sbatch"


def write_slurm_files(
    folder: Path, record: TrialRecord, dgd: dict[str, Any], *, name: str, rank: int, run: str, dynamo: str,
    options: SlurmOptions, gpus_per_node: int | None = None,
) -> list[str]:  # fmt: skip
    """Write `folder/deploy.sbatch` and `folder/README.md`; return the files written (names in `folder`).
    `gpus_per_node`: the config's node size, when it gives one (else the system file's)."""
    folder.mkdir(parents=True, exist_ok=True)
    plan = record.spec.replay.plan
    skus = {role_sku(record.spec.sample, role) for role in ("agg", "prefill", "decode") if _has(plan, role)}
    gpus_per_node = gpus_per_node or min(system_facts(sku).gpus_per_node for sku in skus)
    processes = [frontend_process(dgd, "$PORT"), *engine_processes(plan, dgd)]
    request = record.spec.replay
    model = record.spec.sample["model_name"]
    written = [SCRIPT, "README.md"]
    if request.workload.trace_path:
        shutil.copyfile(request.workload.trace_path, folder / Path(request.workload.trace_path).name)
        written.append(Path(request.workload.trace_path).name)
    traffic = [*aiperf_argv(request, model, "http://$HEAD:$PORT", trace_dir="$HERE"), "--artifact-dir", "$LOGS/aiperf"]
    about = [f"Rank {rank} of run {run}: {describe(record.spec)}", f"Trial {record.key}; ai-dynamo {dynamo}.",
             f"Submit: sbatch {SCRIPT} (from any folder every node sees; README.md)."]  # fmt: skip
    script = slurm_script(name=name, about=about, processes=processes, gpus_per_node=gpus_per_node, options=options,
                          traffic_step=traffic, engine="engine")  # fmt: skip
    atomic_write_text(folder / SCRIPT, script)
    (folder / SCRIPT).chmod(0o755)
    atomic_write_text(folder / "README.md", _readme(options, skus, gpus_per_node, processes, dynamo, model))
    return written


def _has(plan: Any, role: str) -> bool:
    return getattr(plan, f"{role}_engine_args") is not None


def _readme(options: SlurmOptions, skus: set[str], gpus_per_node: int, processes: list, dynamo: str, model: str) -> str:
    environment = (
        f"the container image `{options.image}` through Pyxis" if options.image
        else f"the Python environment `{options.python_env}`" if options.python_env
        else "**none yet**: the script refuses to run until it is written with one (below)"
    )  # fmt: skip
    workers = [p for p in processes if p.role != "frontend"]
    lines = [
        "# The deployment on SLURM", "",
        "```bash",
        f"sbatch {SCRIPT}      # from here or from any folder every node sees; output: <job name>-<job id>.log",
        "```", "",
        "Options are given when the files are written, never edited into the script:", "",
        "```bash",
        "spica report RUN --slurm-python-env /path/to/venv   # or --slurm-image <a Dynamo container image>",
        "                 [--slurm-account A] [--slurm-partition P] [--slurm-time 02:00:00]",
        "```", "",
        f"- Engine environment: {environment}. It needs ai-dynamo {dynamo} with the workers' engine, and "
        f"AIPerf {AIPERF} for the traffic step (`pip install aiperf=={AIPERF}`).",
        f"- Account: {options.account or 'the cluster default'}; partition: {options.partition or 'the cluster default'}; "
        f"time limit: {options.time or 'the partition default'}.",
        f"- Nodes: {', '.join(sorted(skus))}, {gpus_per_node} GPUs per node (aiconfigurator's system file); "
        f"{len(workers)} worker(s), each an `srun` step with its GPUs, the frontend on the first node.",
        "- Discovery: Dynamo's file discovery in `discovery-<job id>/` beside the script, the TCP request plane and "
        "the ZMQ event plane: no etcd or NATS to start. It needs the script's folder to be shared by every node "
        "(the folder jobs are submitted from usually is); the job checks that first and stops if it is not.",
        "- The workers run the Kubernetes file's own commands (`../k8s_deploy.yaml`): the same engine flags, from "
        "the replayed settings. The model is fetched by the engines as the Kubernetes workers fetch it "
        f"(`{model}`; set `HF_TOKEN` for a gated model).",
        "- Logs: `logs-<job id>/<process>.log` per process, `traffic.log` and `aiperf/` for the traffic step.",
        "- Ports come from the job id; workers sharing a node get their own Dynamo system, NIXL side-channel and "
        "KV-event ports. An SGLang worker's own server port is the engine's default: put one SGLang worker per "
        "node, or give each its own `--port` in the Kubernetes file, if yours collide.",
        "",
        "`spica rehearse RUN --where slurm` runs this script with mocker workers in place of the engines "
        "(no GPU) before anyone spends one.",
    ]  # fmt: skip
    return "\n".join(lines) + "\n"
