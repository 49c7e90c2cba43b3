"""A rehearsal through the deployment's own kind of sbatch script, on the SLURM cluster this machine submits to.

The script is the one `deploy/<rank>/slurm/deploy.sbatch` is made by (deploy/slurm_script.py), with the engine
swapped: every worker is a mocker `srun` step (one per worker, as the real workers are) in this machine's Python
environment, no GPU asked for, and its traffic step is Spica's own client (deploy/traffic_step.py), which writes
the timings beside the script. Everything lives in `deploy/<rank>/rehearsal/slurm/`, which the cluster's nodes
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
from spica_lib.deploy.live_client import LiveRequest
from spica_lib.deploy.live_plan import frontend_process, mocker_processes, role_workers
from spica_lib.deploy.live_processes import RehearsalFailed
from spica_lib.deploy.live_results import live_rows, unreached
from spica_lib.deploy.model_folder import write_model_folder
from spica_lib.deploy.rehearsal import ProcessLog, Rehearsal, RequestRow
from spica_lib.deploy.rehearsal_traffic import RehearsalTraffic
from spica_lib.deploy.slurm_script import SlurmOptions, slurm_script
from spica_lib.facts.hardware import system_facts
from spica_lib.replay.plan import role_sku
from spica_lib.trial.spec import TrialRecord

JOB_MINUTES = 15  # the rehearsal job's time limit
POLL_SECONDS = 2.0
# A pending job waits for these; any other reason (PartitionConfig, say) means it never starts as submitted.
WAITING_REASONS = {"None", "Priority", "Resources", "BeginTime", "JobHeldUser", "Dependency"}


def run_on_slurm(
    folder: Path, record: TrialRecord, dgd: dict[str, Any], traffic: RehearsalTraffic, speedup: float,
    found: Rehearsal, partition: str | None = None,
) -> tuple[list[RequestRow], Rehearsal]:  # fmt: skip
    work = folder / "rehearsal" / "slurm"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    write_model_folder(record.spec.sample["model_name"], work / "model")
    plan = record.spec.replay.plan
    roles = role_workers(plan)
    bootstrap = [f"$((PORT + 100 + {i}))" for i in range(roles.get("prefill", ({}, 0))[1])]
    processes = [frontend_process(dgd, "$PORT"), *mocker_processes(plan, "$HERE/model", speedup, bootstrap, True)]
    for process in processes:
        if process.engine_args is not None:
            (work / f"{process.name}.engine.json").write_text(json.dumps(process.engine_args), encoding="utf-8")
    (work / "traffic.json").write_text(traffic.model_dump_json(), encoding="utf-8")
    step = ["python3", "-m", "spica_lib.deploy.traffic_step", "$HERE/traffic.json", "http://$HEAD:$PORT",
            "$HERE/model", "$HERE/live.json", f"{speedup:g}"]  # fmt: skip
    name = f"spica-rehearse-{found.rank}"
    options = SlurmOptions(python_env=sys.prefix, partition=partition, time=str(JOB_MINUTES))
    sku = role_sku(record.spec.sample, next(iter(roles)))
    script = slurm_script(name=name, about=[f"Rehearsal of rank {found.rank}: {found.deployment}"], processes=processes,
                          gpus_per_node=system_facts(str(sku)).gpus_per_node, options=options, traffic_step=step,
                          engine="mocker")  # fmt: skip
    (work / "rehearse.sbatch").write_text(script, encoding="utf-8")
    job = _submit(work)
    logs = work / f"logs-{job}"
    found.processes = [ProcessLog(name=p.name, argv=p.argv, log=str(logs / f"{p.name}.log")) for p in processes]
    started = time.perf_counter()
    _wait(job, work)
    output = work / f"{name}-{job}.log"
    if not (work / "live.json").is_file():
        said = [line for line in _read(output).splitlines() if line.startswith("spica:") or "exited" in line]
        raise RehearsalFailed(f"SLURM job {job} ended without serving its traffic: {' '.join(said) or 'no message'}; "
                              f"its output {output}, the logs of its steps in {logs}")  # fmt: skip
    data = json.loads((work / "live.json").read_text(encoding="utf-8"))
    sent = [LiveRequest(**r) for r in data["requests"]]
    found.live_seconds = max((r.last_token or r.sent for r in sent), default=0.0)
    found.ready_seconds = time.perf_counter() - started - found.live_seconds  # submission to serving, roughly
    rows = live_rows(sent, data["components"], roles, speedup)
    unreached(rows, roles, logs / "frontend.log")
    return rows, found


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
    keeper = subprocess.Popen([sys.executable, "-m", "spica_lib.deploy.folder_keeper", "", job],
                              preexec_fn=lambda: die_with_parent(parent, signal.SIGTERM), stdin=subprocess.DEVNULL)  # fmt: skip
    try:
        deadline = time.monotonic() + JOB_MINUTES * 60 + 120
        while state := _state(job):
            status, _, reason = state.partition(" ")
            if status == "PENDING" and reason not in WAITING_REASONS:
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
