"""Deploy what was simulated, and rehearse it: the default run's deployments started for real (Dynamo's frontend,
router and mocker workers) on this machine and on the SLURM cluster, held against their replays; every way a
deployment fails to come up is a clear failure; a killed rehearsal leaves nothing behind; the scripts pass
shellcheck."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import yaml

from spica_lib.rehearsal import processes
from spica_lib.deploy.live_plan import STEP_ENV, frontend_process, rehearsal_steps
from spica_lib.rehearsal.processes import LiveDeployment, RehearsalFailed, free_ports
from spica_lib.rehearsal.model_folder import write_model_folder
from spica_lib.rehearsal.record import Rehearsal
from spica_lib.rehearsal.rehearse import rehearse
from spica_lib.deploy.slurm_script import SlurmOptions
from spica_lib.deploy.top import write_deployment, write_top_deployments
from spica_lib.run.view import RunView
from spica_lib.trial.spec import TrialRecord

pytestmark = pytest.mark.slow
# How far live throughput may be from the replay in the suite: the rehearsal's own tolerance (rehearsal/record.py,
# 10 %) with room for this shared 2-core machine's load during the suite; latency is judged by the rehearsal's
# verdict, which says when the machine was too loaded to judge it.
TOLERANCE = {"output_tok_s": 0.15, "closed_output_tok_s": 0.15}
# 5 s of the default traffic at 8 req/s. (At 120, the #1 of the suite's small sweep, 8 prefill sequences a worker,
# meets a burst that Dynamo's live mocker refuses and its replay queues: test_refused_requests_are_said_first.)
REQUESTS = 40


@pytest.fixture
def own_tmp(tmp_path, monkeypatch):
    """TMPDIR inside the test's folder, so a folder left behind is seen."""
    folder = tmp_path / "tmp"
    folder.mkdir()
    monkeypatch.setenv("TMPDIR", str(folder))
    monkeypatch.setattr("tempfile.tempdir", None)
    return folder


def copied_rank(run: Path, rank: int, into: Path) -> Path:
    deploy = into / "deploy"
    shutil.copytree(run / "deploy" / str(rank), deploy / str(rank))
    return deploy


def live_children() -> list[psutil.Process]:
    out = []
    for child in psutil.Process().children(recursive=True):
        try:
            if child.status() != psutil.STATUS_ZOMBIE and "dynamo." in " ".join(child.cmdline()):
                out.append(child)
        except psutil.NoSuchProcess:
            pass
    return out


def assert_agrees(found: Rehearsal) -> None:
    assert found.error is None and found.live.completed == found.live.requests == REQUESTS
    closed = (found.closed_live.output_tok_s - found.closed_replay.output_tok_s) / found.closed_replay.output_tok_s
    differences = {**found.differences, "closed_output_tok_s": closed}
    for name, tolerance in TOLERANCE.items():
        assert abs(differences[name]) <= tolerance, (name, differences)
    assert found.verdict in ("agrees", "too loaded to judge latency"), (found.verdict, found.verdict_reasons)
    assert len(found.machine) == 2 and found.closed_in_flight >= 1 and found.closed_live.completed == REQUESTS
    roles = set(found.replay.requests_per_worker)
    assert roles == set(found.live.requests_per_worker) and all(found.live.requests_per_worker.values())


def test_the_default_runs_first_deployment_starts_serves_on_every_role_and_agrees_with_its_replay(
    default_run, tmp_path, own_tmp
):
    run, _ = default_run
    deploy = copied_rank(run, 1, tmp_path)
    found = rehearse(deploy, 1, requests=REQUESTS)
    assert_agrees(found)
    record = TrialRecord.model_validate_json((deploy / "1" / "trial.json").read_text())
    plan = record.spec.replay.plan
    # Every replayed worker served: as many live workers per role as the replay ran, each with requests.
    for role, count in (
        ("agg", plan.num_workers),
        ("prefill", plan.num_prefill_workers),
        ("decode", plan.num_decode_workers),
    ):
        if count:
            assert len(found.live.requests_per_worker[role]) == count
    assert Rehearsal.model_validate_json((deploy / "1" / "rehearsal.json").read_text()) == found
    assert "| itl_mean_ms |" in (deploy / "1" / "rehearsal.md").read_text()
    assert live_children() == [] and list(own_tmp.iterdir()) == []


def test_an_aggregated_deployment_with_the_kv_router_routes_by_its_replayed_settings(default_run, tmp_path, own_tmp):
    run, _ = default_run
    view = RunView(run)
    agg_kv = [r for r in view.records.values() if r.result.status == "feasible" and r.spec.deployment_mode == "agg"
              and r.spec.replay.plan.router_mode == "kv_router"]  # fmt: skip
    assert agg_kv, "the default search replays agg deployments with the KV router"
    deploy = tmp_path / "deploy"
    files = write_deployment(deploy / "1", 1, agg_kv[0], view.config, run=view.validated.run)
    assert files.error is None
    found = rehearse(deploy, 1, requests=REQUESTS)
    assert_agrees(found)
    frontend = next(p for p in found.processes if p.name == "frontend")
    assert frontend.argv[frontend.argv.index("--router-mode") + 1] == "kv"  # the DGD's own frontend flags


def slurm_left() -> tuple[str, list[psutil.Process]]:
    """What a rehearsal on the cluster may not leave: a queued job, a Dynamo process."""
    queued = subprocess.run(["squeue", "-h"], capture_output=True, text=True, check=True).stdout.strip()
    dynamo = []
    for process in psutil.process_iter(["cmdline"]):
        try:
            if "dynamo." in " ".join(process.info["cmdline"] or []) and process.status() != psutil.STATUS_ZOMBIE:
                dynamo.append(process)
        except psutil.NoSuchProcess:
            pass
    return queued, dynamo


def wait_until_nothing_left(seconds: float = 30.0) -> tuple[str, list[psutil.Process]]:
    deadline = time.monotonic() + seconds
    while (left := slurm_left()) != ("", []) and time.monotonic() < deadline:
        time.sleep(0.5)
    return left


@pytest.mark.slurm
@pytest.mark.parametrize("mode", ["disagg", "agg"])
def test_the_sbatch_rehearsal_runs_the_deployments_own_script_counts_every_worker_and_leaves_nothing(
    default_run, tmp_path, cluster, mode
):
    run, _ = default_run
    view = RunView(run)
    best = next(r for r in view.ranked if r.branch == mode)  # the best of each mode the default run ranks
    deploy = tmp_path / "deploy"
    files = write_deployment(deploy / "1", 1, view.records[best.key], view.config, run=view.validated.run,
                             slurm=SlurmOptions(python_env=sys.prefix))  # fmt: skip
    assert files.error is None and files.slurm_error is None
    found = rehearse(deploy, 1, where="slurm", requests=REQUESTS, partition="gpu")
    assert found.error is None and found.live.completed == REQUESTS and found.where == "slurm"
    assert abs(found.differences["output_tok_s"]) <= TOLERANCE["output_tok_s"]
    work = deploy / "1" / "rehearsal" / "slurm"
    output = next(work.glob("spica-rehearse-1-*.log")).read_text()
    plan = view.records[best.key].spec.replay.plan
    workers = (plan.num_workers or 0) + (plan.num_prefill_workers or 0) + (plan.num_decode_workers or 0)
    ready = json.loads(next(work.glob("logs-*/ready.json")).read_text())
    assert "every worker registered" in output and ready["workers"] == workers  # each worker, by its own port
    assert 0 < found.ready_seconds == ready["ready_seconds"]  # from the job's start, not its submission
    # The script the cluster ran is the deployment's own, its worker commands alone swapped (the same function
    # writes both): every option, export and check of deploy.sbatch is in it.
    script = (work / "rehearse.sbatch").read_text()
    own = (deploy / "1" / "slurm" / "deploy.sbatch").read_text()
    for line in own.splitlines():
        if line.startswith(("#SBATCH --gpus-per-node", "#SBATCH --exclusive", "#SBATCH --mem", "export ", "  ONE=",
                            "start_step() {", "wait_until_serving() {", "free_port ")):  # fmt: skip
            assert line in script, line
    assert wait_until_nothing_left() == ("", [])
    assert not list(work.glob("discovery-*")) and list(work.glob("logs-*/frontend.log"))


@pytest.mark.slurm
def test_a_worker_given_a_bad_engine_flag_fails_the_sbatch_rehearsal_by_name_and_leaves_nothing(
    default_run, tmp_path, cluster, monkeypatch
):
    from spica_lib.rehearsal import on_slurm

    def broken(*args, **kwargs):
        steps = rehearsal_steps(*args, **kwargs)
        bad = steps[-1]
        return [*steps[:-1], bad.model_copy(update={"argv": [*bad.argv, "--no-such-engine-flag"]})]

    monkeypatch.setattr(on_slurm, "rehearsal_steps", broken)
    run, _ = default_run
    deploy = copied_rank(run, 1, tmp_path)
    last = rehearsal_steps(first_rank(default_run).spec.replay.plan, dgd_of(default_run), "sglang", "m", 1.0)[-1].name
    with pytest.raises(RehearsalFailed, match=rf"spica: {last} exited before the deployment served; its log: .*{last}\.log"):
        rehearse(deploy, 1, where="slurm", requests=10, partition="gpu")
    assert wait_until_nothing_left() == ("", [])


@pytest.mark.slurm
def test_a_killed_sbatch_rehearsal_leaves_no_job_and_no_dynamo_process(default_run, tmp_path, cluster):
    run, _ = default_run
    copy = tmp_path / "run"
    shutil.copytree(run, copy, ignore=shutil.ignore_patterns("rounds", ".snakemake"))
    process = subprocess.Popen([sys.executable, "-m", "spica_lib.cli", "rehearse", str(copy), "--where", "slurm",
                                "--partition", "gpu", "--requests", "240"], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
    def mockers() -> list[psutil.Process]:  # the job's worker steps, started by slurmstepd, not by this test
        return [p for p in slurm_left()[1] if "dynamo.mocker" in " ".join(p.cmdline())]

    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and process.poll() is None and not mockers():
        time.sleep(0.5)
    assert process.poll() is None and mockers(), "the job's mocker steps never started"
    process.kill()  # outright: no handler of the rehearsal's runs; its keeper, which the kernel signals, scancels
    process.wait()
    assert wait_until_nothing_left(60) == ("", [])


def test_the_generated_sbatch_scripts_pass_shellcheck(default_run, tmp_path):
    run, _ = default_run
    view = RunView(run)
    with_env = write_top_deployments(view, tmp_path / "env", slurm=SlurmOptions(python_env="/opt/dynamo",
                                                                                  partition="gpu", time="30"))  # fmt: skip
    image = write_top_deployments(view, tmp_path / "image", slurm=SlurmOptions(image="nvcr.io/nvidia/dynamo:1.5.1"))
    bare = write_top_deployments(view, tmp_path / "bare")
    assert all(f.slurm and f.slurm_error is None for f in [*with_env, *image, *bare])
    scripts = sorted(tmp_path.glob("*/*/slurm/deploy.sbatch"))
    assert len(scripts) == 3 * len(with_env)
    shellcheck = Path(sys.executable).parent / "shellcheck"
    done = subprocess.run([str(shellcheck), *map(str, scripts)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout[-3000:]
    # Written without an engine environment, the script refuses to run and names the option.
    refused = subprocess.run(["bash", str(tmp_path / "bare" / "1" / "slurm" / "deploy.sbatch")], capture_output=True,
                             text=True, check=False)  # fmt: skip
    assert refused.returncode == 2 and "--slurm-python-env" in refused.stderr
    text = (tmp_path / "env" / "1" / "slurm" / "deploy.sbatch").read_text()
    assert "#SBATCH --partition=gpu" in text and "#SBATCH --time=30" in text and "#SBATCH --account" not in text
    # What a real cluster needs and this one-node cluster cannot show (TaskPlugin=task/none: no CPU confinement, no
    # GPU hold on SLURM 22.05), read from the script: every step told the discovery and the planes by environment
    # (the workers too: Dynamo's workers default to etcd), no plane on any command line; the node taken whole and its
    # CPUs and memory shared out per step; a step without GPUs asking for none.
    assert "export " + " ".join(f"{k}={v}" for k, v in STEP_ENV.items()) in text
    assert "--discovery-backend" not in text and "--request-plane" not in text
    assert "#SBATCH --exclusive" in text and "#SBATCH --mem=0" in text
    assert "ONE=(--exact --cpus-per-task=$((CPUS / STEPS))" in text and "--mem=$((SLURM_MEM_PER_NODE / STEPS))" in text
    assert text.count('--gpus-per-node=0 "${LAUNCH[@]}"') == 3  # the AIPerf check, the model's fetch, the traffic
    assert 'srun --nodes=1 --ntasks=1 "${ONE[@]}" --gpus-per-node="$gpus"' in text  # a worker's GPUs, its own
    assert "NCCL_CUMEM_ENABLE=1" in text and "VLLM_NIXL_SIDE_CHANNEL_PORT" not in text  # the DGD's env; SGLang's ports
    assert "aiperf --version" in text and 'snapshot_download("Qwen/Qwen3-32B")' in text  # checked, fetched once
    # The workers run the Kubernetes file's own scripts: the same engine flags, from one source.
    dgd = next(yaml.safe_load_all((tmp_path / "env" / "1" / "k8s_deploy.yaml").read_text()))
    for component in dgd["spec"]["components"]:
        main = next(c for c in component["podTemplate"]["spec"]["containers"] if c["name"] == "main")
        if main.get("command", [])[-1:] == ["-c"]:
            assert main["args"][0].strip().splitlines()[-1] in text


# What a rehearsal must catch: each way a deployment fails to come up, named with its process and its log.


def first_rank(default_run) -> TrialRecord:
    run, _ = default_run
    return TrialRecord.model_validate_json((run / "deploy" / "1" / "trial.json").read_text())


def dgd_of(default_run) -> dict:
    run, _ = default_run
    return next(yaml.safe_load_all((run / "deploy" / "1" / "k8s_deploy.yaml").read_text()))


def test_a_worker_whose_engine_refuses_a_setting_is_named_with_its_log(default_run, tmp_path, own_tmp, monkeypatch):
    from spica_lib.rehearsal import rehearse as rehearse_module

    def refused(*args, **kwargs):  # the last worker's engine is handed a flag it does not know
        steps = rehearsal_steps(*args, **kwargs)
        return [*steps[:-1], steps[-1].model_copy(update={"argv": [*steps[-1].argv, "--no-such-engine-flag"]})]

    monkeypatch.setattr(rehearse_module, "rehearsal_steps", refused)
    run, _ = default_run
    deploy = copied_rank(run, 1, tmp_path)
    with pytest.raises(RehearsalFailed, match=r"^decode-0 exited with code \d+ before the deployment served; its log .*decode-0\.log"):
        rehearse(deploy, 1, requests=10)
    assert "exited with code" in Rehearsal.model_validate_json((deploy / "1" / "rehearsal.json").read_text()).error
    assert live_children() == [] and list(own_tmp.iterdir()) == []


def test_a_worker_that_never_registers_is_named_within_a_bounded_wait(default_run, tmp_path, own_tmp, monkeypatch):
    monkeypatch.setattr(processes, "REGISTER_WAIT_SECONDS", 10.0)
    record, dgd = first_rank(default_run), dgd_of(default_run)
    model = record.spec.sample["model_name"]
    (port,) = free_ports(1)
    with LiveDeployment(tmp_path / "logs", port) as live:
        write_model_folder(model, live.model_dir)
        steps = rehearsal_steps(record.spec.replay.plan, dgd, "sglang", model, 1.0)
        # Alive, but told another discovery backend than the frontend's: the defect of a worker step without the
        # script's exports. It registers where the frontend never looks, and is named.
        steps = [s.model_copy(update={"env": {**s.env, "DYN_DISCOVERY_BACKEND": "mem"}}) if s.name == "prefill-1" else s
                 for s in steps]  # fmt: skip
        live.start(steps)
        started_at = time.monotonic()
        with pytest.raises(RehearsalFailed, match=r"^prefill-1: never registered with the frontend within 10 s"):
            live.wait_until_serving(model)
        assert time.monotonic() - started_at < 60
    assert live_children() == [] and list(own_tmp.iterdir()) == []


def test_a_frontend_that_never_answers_fails_within_a_bounded_wait(default_run, tmp_path, own_tmp, monkeypatch):
    monkeypatch.setattr(processes, "FRONTEND_WAIT_SECONDS", 5.0)
    dgd = dgd_of(default_run)
    port, elsewhere = free_ports(2)
    with LiveDeployment(tmp_path / "logs", port) as live:
        frontend = frontend_process(dgd)
        frontend.argv = [str(elsewhere) if w == "{http_port}" else w for w in frontend.argv]  # not where it is asked
        live.start([frontend])
        with pytest.raises(
            RehearsalFailed, match=r"the frontend never answered .*/health within 5 s; its log .*frontend\.log"
        ):
            live.wait_until_serving("unused")
    assert live_children() == [] and list(own_tmp.iterdir()) == []


def test_a_role_the_router_never_reaches_is_a_failure(default_run):
    # The router's choices, as the live client saw them (each chunk names its prefill and decode worker, and /health
    # says which component each worker registered under): every request went to the decode worker alone.
    from spica_lib.rehearsal.client import LiveRequest
    from spica_lib.deploy.live_plan import role_workers
    from spica_lib.rehearsal.results import live_rows, unreached

    plan = first_rank(default_run).spec.replay.plan
    assert plan.num_prefill_workers, "the default run's #1 is disaggregated"
    components = {"11": "prefill", "12": "prefill", "21": "backend"}
    sent = [LiveRequest(index=i, sent=0.1 * i, first_token=0.1 * i + 0.2, last_token=0.1 * i + 1.0, tokens=40,
                        prefill_worker="21", decode_worker="21") for i in range(8)]  # fmt: skip
    rows = live_rows(sent, components, role_workers(plan), 1.0)
    assert all(set(r.workers) == {"decode"} for r in rows)
    with pytest.raises(RehearsalFailed, match=r"the router never reached the prefill workers: .* the frontend's log x"):
        unreached(rows, role_workers(plan), Path("x"))
    served = [LiveRequest(**{**vars(r), "prefill_worker": "11" if r.index % 2 else "12"}) for r in sent]
    unreached(live_rows(served, components, role_workers(plan), 1.0), role_workers(plan), Path("x"))  # both reached


def test_a_killed_rehearsal_leaves_no_process_and_no_shared_folder(default_run, tmp_path):
    run, _ = default_run
    copy = tmp_path / "run"
    shutil.copytree(run, copy, ignore=shutil.ignore_patterns("rounds", ".snakemake"))
    own = tmp_path / "tmp"
    own.mkdir()
    env = {**os.environ, "TMPDIR": str(own)}
    errors = tmp_path / "rehearse.err"
    with open(errors, "wb") as err:
        process = subprocess.Popen([sys.executable, "-m", "spica_lib.cli", "rehearse", str(copy), "--requests", "240"],
                                   env=env, stdout=subprocess.DEVNULL, stderr=err, start_new_session=True)  # fmt: skip

    def mockers() -> list[psutil.Process]:
        try:
            found = psutil.Process(process.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return []
        return [c for c in found if "dynamo.mocker" in " ".join(c.cmdline())]

    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and process.poll() is None and not mockers():
        time.sleep(0.2)
    time.sleep(2)  # the workers are starting: their folder in use
    children = psutil.Process(process.pid).children(recursive=True)
    assert mockers() and list(own.iterdir()), errors.read_text()[-2000:]
    process.kill()
    process.wait()
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and (any(c.is_running() and c.status() != psutil.STATUS_ZOMBIE for c in children)
                                           or list(own.iterdir())):  # fmt: skip
        time.sleep(0.2)
    assert [c.pid for c in children if c.is_running() and c.status() != psutil.STATUS_ZOMBIE] == []
    assert list(own.iterdir()) == []


def test_requests_the_live_system_refused_are_said_first_and_fail_the_command():
    from spica_lib.rehearsal.record import LoadStats
    from spica_lib.rehearsal.rehearse import refusals, rehearsal_markdown

    error = "HTTP 503: Generate Error: mocker handoff session limit reached for DP rank 0"
    found = Rehearsal(rank=1, key="k", deployment="d", where="local", speedup=1.0, traffic="t",
                      live=LoadStats(requests=120, completed=85, errors=[error]),
                      replay=LoadStats(requests=120, completed=120))  # fmt: skip
    found.notes += refusals(found)
    assert found.notes[-1].startswith("35 of 120 requests failed live (first: HTTP 503") and "queues" in found.notes[-1]
    assert rehearsal_markdown(found).split("\n")[4].startswith("**35 of 120 requests failed live")
    assert refusals(found.model_copy(update={"live": LoadStats(requests=120, completed=120)})) == []
