"""The rule script's side of a pilot: hand the job to the spool, wait for a pilot to run it, exit with its code.

A rule script (spica_lib/pilot/rule_script.py) calls `run_on_pilot` here for a job a pilot runs.

The job's stdout and stderr are printed here when it ends (its log file it writes itself, on the
shared file system). The job fails here, so Snakemake retries it as it would a SLURM job, when the
pilot running it is stopped (scancel, preemption) or goes quiet for `LOST_SECONDS` (node lost), when
the pilot that claimed it names another job (or none) in `WRONG_BEATS` of its beats, and when the
sweep's keeper is gone. A job is owned by one pilot at a time: before it fails here on a pilot gone
quiet (which may only be stalled, and wake), it has that pilot stop the job (its cancel file) and the
keeper `scancel` it, and it waits until SLURM no longer lists the pilot; only then may Snakemake's
retry start the job elsewhere. A stopped rule script (Snakemake cancelled the job) takes its request
back, or has the pilot stop the job.
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
from spica_lib.pilot.spool import (
    POLL_SECONDS,
    Liveness,
    PilotClass,
    PilotRequest,
    PilotResult,
    Spool,
    read_beat,
    read_text,
    touch_private,
    write_model_file,
    write_private,
)
from spica_lib.run.job_args import JobArgs

CANCEL_SECONDS = 15.0
WRONG_BEATS = 5  # beats of the claiming pilot that name another job (or none): it is not running this one
VANISHED_SECONDS = 1.0  # a request neither waiting nor claimed for this long was removed from the spool
DEFAULT_MEM_MB = 4000
DEFAULT_RUNTIME_MINUTES = 60


class _Cancelled(BaseException):
    pass


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
        try:
            write_model_file(spool.request(request_id), request)
        except FileNotFoundError:  # never made again here: a spool re-created by a write would not be private
            print(f"spica: the sweep's pilot spool {spool.root} is gone; this {name} job was not run", file=sys.stderr)
            return 1
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
    wrong: set[int] = set()  # beats of the claiming pilot that named another job
    vanished: float | None = None  # since when neither the request nor its claim was seen
    while True:
        result = _result(spool, request_id)
        if result is not None:
            if result.reason:
                print(f"spica: {result.reason}", file=sys.stderr)
            return result.exit
        claim = spool.claim_of(request_id)
        if claim is not None:
            name = claim[1]
            beat = read_beat(spool.beat(name))
            alive = pilot.alive(None if beat is None else str(beat.beat))
            if (beat is not None and beat.gone) or not alive:
                time.sleep(1.0)  # a pilot on its way out writes the job's result before its last beat
                if _result(spool, request_id) is not None:
                    continue
                if beat is not None and beat.gone:  # it stopped the job before it said goodbye
                    print(f"spica: pilot job {name} was lost while it ran this job ({beat.gone})", file=sys.stderr)
                    return 1
                return _give_up(spool, request_id, name, f"no heartbeat for {pilot.lost_seconds:g} s")
            if beat is not None and beat.running != request_id:
                wrong.add(beat.beat)
                if len(wrong) >= WRONG_BEATS and _result(spool, request_id) is None:
                    what = f"job {beat.running}" if beat.running else "no job"
                    print(f"spica: pilot job {name} claimed this job, but {len(wrong)} of its beats name {what}; "
                          "it is not running this one", file=sys.stderr)  # fmt: skip
                    _cancel(spool, request_id)
                    return 1
            else:
                wrong.clear()
        elif not keeper.alive(read_text(spool.heartbeat)):
            print("spica: the sweep's pilot keeper is gone; this job was not run", file=sys.stderr)
            return 1
        elif spool.request(request_id).exists():
            vanished = None
        elif vanished is None:
            vanished = time.monotonic()  # or renamed to its claim between the two looks: look again
        elif time.monotonic() - vanished > VANISHED_SECONDS and _result(spool, request_id) is None:
            print("spica: its request is gone from the spool (neither waiting, claimed nor done); "
                  "this job did not run to its end", file=sys.stderr)  # fmt: skip
            return 1
        time.sleep(POLL_SECONDS)


def _give_up(spool: Spool, request_id: str, pilot: str, why: str) -> int:
    """A pilot gone quiet may be stalled, not dead: have it stop the job, the keeper scancel it, and wait for that."""
    print(f"spica: pilot job {pilot} was lost while it ran this job ({why}); "
          "waiting for the keeper to scancel it before this job may run elsewhere", file=sys.stderr)  # fmt: skip
    _cancel(spool, request_id)
    with contextlib.suppress(OSError):
        write_private(spool.abandon(pilot), why)
    keeper = Liveness()
    while True:
        result = _result(spool, request_id)
        if result is not None:  # it woke and ended the job itself
            print(f"spica: pilot job {pilot} ended this job: {result.reason or f'exit {result.exit}'}", file=sys.stderr)
            return result.exit
        if spool.ended(pilot).exists():
            print(f"spica: pilot job {pilot} has ended (SLURM no longer lists it)", file=sys.stderr)
            return 1
        if not keeper.alive(read_text(spool.heartbeat)):
            print("spica: the sweep's pilot keeper is gone (its stop scancels the pilots)", file=sys.stderr)
            return 1
        time.sleep(POLL_SECONDS)


def _cancel(spool: Spool, request_id: str) -> None:
    with contextlib.suppress(OSError):  # the spool is gone: so is the pilot, and the job with it
        touch_private(spool.cancel(request_id))


def _withdraw(spool: Spool, request_id: str) -> int:
    """Stopped: take the request back if no pilot has it, else have its pilot stop the job, and wait for that."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        spool.request(request_id).unlink()
        return 1
    except FileNotFoundError:
        pass
    _cancel(spool, request_id)
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
