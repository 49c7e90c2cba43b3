"""A rehearsal through the deployment's own kind of sbatch script, on the SLURM cluster this machine submits to.

The script is rendered from the deployment's own steps by the function `deploy/<rank>/slurm/deploy.sbatch` is
rendered by (deploy/slurm_script.py), with each worker's engine command swapped for Dynamo's mocker and nothing
else (deploy/live_plan.py `rehearsal_steps`): the same exports, ports, `srun` options and GPUs, readiness and
teardown, in this machine's Python environment. Its traffic step is Spica's own client (rehearsal/traffic_step.py),
which records every token's time beside the script (AIPerf's summary could not be held against the replay request
by request). Everything lives in `deploy/<rank>/rehearsal/slurm/`, which the cluster's nodes
must see (this machine's run folder). The job is cancelled if the rehearsal ends before it (a keeper cancels it
even when the rehearsal is killed outright).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from spica_lib.base.lifetime import die_with_parent
from spica_lib.deploy.live_plan import rehearsal_steps
from spica_lib.rehearsal.processes import RehearsalFailed
from spica_lib.rehearsal.results import run_rows
from spica_lib.rehearsal.model_folder import write_model_folder
from spica_lib.rehearsal.record import ProcessLog, Rehearsal, RequestRow
from spica_lib.rehearsal.traffic import RehearsalTraffic
from spica_lib.deploy.slurm_script import SlurmOptions, TrafficStep, slurm_script
from spica_lib.rehearsal.traffic_step import read_runs
from spica_lib.trial.spec import TrialRecord

JOB_MINUTES = 15  # the rehearsal job's time limit
POLL_SECONDS = 2.0
# A pending job waits for these; any other reason (PartitionConfig, say) means it never starts as submitted.
# The node held by another partition's job reads as "Nodes required for job are DOWN, DRAINED or reserved for jobs in
# higher priority partitions" (SLURM 22.05): a wait too, bounded by the job's own deadline.
WAITING_REASONS = {"None", "Priority", "Resources", "BeginTime", "JobHeldUser", "Dependency", "ReqNodeNotAvail",
                   "Nodes required for job are DOWN"}  # each as the reason begins, before its first comma


def run_on_slurm(
    folder: Path, record: TrialRecord, dgd: dict[str, Any], runs: tuple[RehearsalTraffic, RehearsalTraffic],
    speedup: float, found: Rehearsal, gpus_per_node: int, partition: str | None = None,
) -> tuple[list[list[RequestRow]], Rehearsal]:  # fmt: skip
    """The rehearsal's steps through the deployment's own kind of sbatch script; its open then its closed run."""
    work = folder / "rehearsal" / "slurm"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    model = record.spec.sample["model_name"]
    write_model_folder(model, work / "model")
    plan = record.spec.replay.plan
    steps = rehearsal_steps(plan, dgd, str(record.spec.sample.get("backend")), model, speedup)
    for step in steps:
        if step.engine_args is not None:
            (work / f"{step.name}.engine.json").write_text(json.dumps(step.engine_args), encoding="utf-8")
    for traffic, file in zip(runs, ("open.json", "closed.json"), strict=True):
        (work / file).write_text(traffic.model_dump_json(), encoding="utf-8")
    step = TrafficStep(
        argv=["python3", "-m", "spica_lib.rehearsal.traffic_step", "$HERE/open.json", "$HERE/closed.json",
              "http://$HEAD:$PORT", model, "$HERE/model", "$HERE/live.json", f"{speedup:g}"],
        check=["python3", "-c", "import spica_lib.rehearsal.traffic_step"],
        check_fails="Spica's rehearsal client is not importable in this Python environment",
    )  # fmt: skip
    name = f"spica-rehearse-{found.rank}"
    options = SlurmOptions(python_env=sys.prefix, partition=partition, time=str(JOB_MINUTES))
    script = slurm_script(name=name, about=[f"Rehearsal of rank {found.rank}: {found.deployment}"], processes=steps,
                          gpus_per_node=gpus_per_node, options=options,
                          model=model, fetch=None, traffic=step, engine="mocker")  # fmt: skip
    (work / "rehearse.sbatch").write_text(script, encoding="utf-8")
    job = _submit(work)
    logs = work / f"logs-{job}"
    found.processes = [ProcessLog(name=p.name, argv=p.argv, log=str(logs / f"{p.name}.log")) for p in steps]
    _wait(job, work)
    output = work / f"{name}-{job}.log"
    if not (work / "live.json").is_file():
        said = [line for line in _read(output).splitlines() if line.startswith("spica:") or "exited" in line]
        raise RehearsalFailed(f"SLURM job {job} ended without serving its traffic: {' '.join(said) or 'no message'}; "
                              f"its output {output}, the logs of its steps in {logs}")  # fmt: skip
    data = json.loads((work / "live.json").read_text(encoding="utf-8"))
    ready = json.loads((logs / "ready.json").read_text(encoding="utf-8"))
    found.ready_seconds = float(ready["ready_seconds"])  # from the job's start, not its submission
    return run_rows(read_runs(data), data["components"], plan, speedup, logs / "frontend.log", found), found


def _submit(work: Path) -> str:
    done = subprocess.run(["sbatch", "--parsable", "rehearse.sbatch"], cwd=work, capture_output=True, text=True,
                          timeout=60, check=False)  # fmt: skip
    if done.returncode != 0:
        raise RehearsalFailed(
            f"sbatch refused the rehearsal's script ({work / 'rehearse.sbatch'}): {done.stderr.strip()}"
        )
    return done.stdout.strip().split(";")[0]


def _wait(job: str, work: Path) -> None:
    """Until the job has left the queue; cancelled if this process ends first (or dies: the keeper)."""
    parent = os.getpid()
    keeper = subprocess.Popen([sys.executable, "-m", "spica_lib.rehearsal.folder_keeper", "", job],
                              preexec_fn=lambda: die_with_parent(parent, signal.SIGTERM), stdin=subprocess.DEVNULL)  # fmt: skip
    try:
        deadline = time.monotonic() + JOB_MINUTES * 60 + 120
        while state := _state(job):
            status, _, reason = state.partition(" ")
            if status == "PENDING" and reason.split(",")[0] not in WAITING_REASONS:
                raise RehearsalFailed(f"SLURM job {job} cannot start: pending ({reason}); cancelled")
            if time.monotonic() > deadline:
                raise RehearsalFailed(f"SLURM job {job} is still queued or running after its time limit; cancelled")
            time.sleep(POLL_SECONDS)
    except BaseException:
        subprocess.run(["scancel", job], check=False, capture_output=True, timeout=60)
        raise
    finally:
        keeper.terminate()
        keeper.wait()


def _state(job: str) -> str:
    """The job's state and pending reason ("" once it has left the queue)."""
    done = subprocess.run(["squeue", "-h", "-j", job, "-o", "%T %r"], capture_output=True, text=True, timeout=60,
                          check=False)  # fmt: skip
    return done.stdout.strip()


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
