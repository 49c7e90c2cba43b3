"""The rule script's side of a pilot: hand the job to the spool, wait for a pilot to run it, exit with its code.

The scripts of the replaying rules (replay, finish, stress, baselines) call `run_job` here: with no
pilots it runs the job as every other rule script does (spica_lib.host.client).

The job's stdout and stderr are printed here when it ends (its log file it writes itself, on the
shared file system). The job fails here, so Snakemake retries it as it would a SLURM job, when the
pilot running it is stopped (scancel, preemption) or goes quiet for `LOST_SECONDS` (node lost), and
when the sweep's keeper is gone. A stopped rule script (Snakemake cancelled the job) takes its
request back, or has the pilot stop the job.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import sys
import time
from typing import Any

from spica_lib.host.client import job_environment
from spica_lib.pilot.settings import PILOT_JOBS
from spica_lib.pilot.spool import (
    POLL_SECONDS,
    SPOOL_VARIABLE,
    Liveness,
    PilotClass,
    PilotRequest,
    PilotResult,
    Spool,
    read_beat,
    read_text,
    write_model_file,
)
from spica_lib.run.job import JobArgs

CANCEL_SECONDS = 15.0
DEFAULT_MEM_MB = 4000
DEFAULT_RUNTIME_MINUTES = 60


class _Cancelled(BaseException):
    pass


def run_job(name: str, smk: Any) -> None:
    """A replaying rule's script: hand job `name` to the sweep's pilots when it has them, else run it as any job."""
    from spica_lib.host.client import run_job_args

    job = JobArgs.from_snakemake(smk)
    spool = pilot_spool(name)
    if spool is None:
        run_job_args(name, job)
        return
    code = run_on_pilot(name, job, spool)
    if code != 0:
        sys.exit(code)


def pilot_spool(name: str) -> str | None:
    """The sweep's pilot spool when job `name` is one its pilots run and this is not a SLURM job, else None."""
    spool = os.environ.get(SPOOL_VARIABLE)
    return spool if spool and name in PILOT_JOBS and "SLURM_JOB_ID" not in os.environ else None


def needs_of(job: JobArgs) -> PilotClass:
    """What this job would have asked SLURM for (its threads and resources): the pilot it may run in."""
    resources = job.resources

    def text(name: str) -> str | None:
        value = resources.get(name)
        return str(value) if value not in (None, "") else None

    return PilotClass(
        cpus=job.threads,
        mem_mb=int(resources.get("mem_mb") or DEFAULT_MEM_MB),
        partition=text("slurm_partition"),
        account=text("slurm_account"),
        gres=text("gres"),
    )


def run_on_pilot(name: str, job: JobArgs, spool_root: str) -> int:
    """The exit code of job `name` run by one of the sweep's pilots."""
    spool = Spool(spool_root)
    request_id = f"{time.time_ns():020d}-{os.getpid()}-{secrets.token_hex(4)}"
    request = PilotRequest(
        job=name,
        args=job.model_dump(mode="json"),
        cwd=os.getcwd(),
        env=job_environment(dict(os.environ)),
        needs=needs_of(job),
        runtime_minutes=float(job.resources.get("runtime") or DEFAULT_RUNTIME_MINUTES),
    )
    previous = {signum: signal.signal(signum, _raise_cancelled) for signum in (signal.SIGTERM, signal.SIGINT)}
    try:
        write_model_file(spool.request(request_id), request)
        print(f"spica: {name} job handed to the sweep's pilots (request {request_id})", file=sys.stderr, flush=True)
        return _wait(spool, request_id)
    except _Cancelled:
        return _withdraw(spool, request_id)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        _print_output(spool, request_id)
        spool.clear_done(request_id)


def _wait(spool: Spool, request_id: str) -> int:
    keeper, pilot = Liveness(), Liveness()
    while True:
        result = _result(spool, request_id)
        if result is not None:
            if result.reason:
                print(f"spica: {result.reason}", file=sys.stderr)
            return result.exit
        claim = spool.claim_of(request_id)
        if claim is not None:
            beat = read_beat(spool.beat(claim[1]))
            if not pilot.alive(None if beat is None else str(beat.beat)) or (beat is not None and beat.gone):
                time.sleep(1.0)  # a pilot on its way out writes the job's result before its last beat
                if _result(spool, request_id) is not None:
                    continue
                why = beat.gone if beat is not None and beat.gone else f"no heartbeat for {pilot.lost_seconds:g} s"
                print(f"spica: pilot job {claim[1]} was lost while it ran this job ({why})", file=sys.stderr)
                return 1
        elif not keeper.alive(read_text(spool.heartbeat)):
            print("spica: the sweep's pilot keeper is gone; this job was not run", file=sys.stderr)
            return 1
        time.sleep(POLL_SECONDS)


def _withdraw(spool: Spool, request_id: str) -> int:
    """Stopped: take the request back if no pilot has it, else have its pilot stop the job, and wait for that."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        spool.request(request_id).unlink()
        return 1
    except FileNotFoundError:
        pass
    with contextlib.suppress(OSError):  # the spool is gone: so is the pilot, and the job with it
        spool.cancel(request_id).touch()
    deadline = time.monotonic() + CANCEL_SECONDS
    while time.monotonic() < deadline and _result(spool, request_id) is None and spool.claim_of(request_id):
        time.sleep(POLL_SECONDS)
    return 1


def _result(spool: Spool, request_id: str) -> PilotResult | None:
    text = read_text(spool.result(request_id))
    return None if text is None else PilotResult.model_validate_json(text)


def _print_output(spool: Spool, request_id: str) -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    for stream, target in (("out", sys.stdout), ("err", sys.stderr)):
        path = spool.output(request_id, stream)
        if path.exists():
            with open(path, encoding="utf-8", errors="replace") as source:
                shutil.copyfileobj(source, target)
            target.flush()


def _raise_cancelled(signum: int, frame: Any) -> None:
    raise _Cancelled()
