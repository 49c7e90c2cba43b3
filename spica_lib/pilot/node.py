"""A pilot: the SLURM job that holds a warm host on a compute node for as long as the sweep has work for it.

    python -m spica_lib.pilot.node SPOOL --needs JSON --minutes M --idle-seconds S

It imports Dynamo and Vizier once, then takes the spool's requests that asked for what it has
(PilotClass), one at a time: each job's warm-up runs here (so later jobs fork warm) and the job
itself in a forked child, exactly as in the sweep's local warm host. A trial there pays its replay,
not a SLURM submission, a Snakemake start and a warm-up.

It ends by itself when the sweep ends (stop file, or spool gone), when the sweep's heartbeat stops
(the machine running Snakemake died), when it has had nothing to run for `idle_seconds` (it frees
its node between rounds), or when its time limit is nearer than the next job's. SIGTERM (scancel,
preemption, the time limit) stops the job it runs and reports that job as lost, so its rule script
fails and Snakemake retries it (another pilot); a node lost outright is noticed by its beat going
quiet. No process outlives it: the job child dies with it (`PR_SET_PDEATHSIG`), the job's replays
with the job.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import socket
import sys
import threading
import time
import traceback
from dataclasses import dataclass

from spica_lib.base.lifetime import signal_group
from spica_lib.pilot.spool import (
    BEAT_SECONDS,
    POLL_SECONDS,
    Liveness,
    PilotBeat,
    PilotClass,
    PilotRequest,
    PilotResult,
    Spool,
    read_text,
    write_model_file,
)

SWEEP_LOST_SECONDS = 60.0  # the sweep's heartbeat unchanged this long: its machine is gone
STOP_GRACE_SECONDS = 5.0
SAFETY_SECONDS = 60.0  # of its time limit a pilot keeps back: it takes no job that would end inside it


class _Stop(BaseException):
    """SIGTERM: SLURM is ending this pilot."""


@dataclass
class _Running:
    request_id: str
    pid: int
    stop_deadline: float | None = None
    reason: str = ""


class Pilot:
    def __init__(
        self,
        spool: Spool,
        needs: PilotClass,
        minutes: float,
        idle_seconds: float,
        name: str,
        sweep_lost_seconds: float = SWEEP_LOST_SECONDS,
    ):
        self.spool, self.needs, self.idle_seconds, self.name = spool, needs, idle_seconds, name
        self.ends_at = time.monotonic() + minutes * 60
        self.sweep = Liveness(sweep_lost_seconds)
        self.running: _Running | None = None
        self.idle_since = time.monotonic()
        self.too_little_time = ""
        self.gone = ""
        self.beats = 0
        self.lock = threading.Lock()

    # -- the loop --------------------------------------------------------------------------------

    def serve(self) -> None:
        while not self.gone:
            self.gone = self._reason_to_end()
            if self.gone:
                break
            self._watch_cancel()
            self._reap()
            if self.running is None:
                self._take()
            time.sleep(POLL_SECONDS)

    def _reason_to_end(self) -> str:
        if not self.spool.exists():
            return "its sweep's spool folder is gone"
        if self.spool.stop_file.exists():
            return "the sweep ended"
        if not self.sweep.alive(read_text(self.spool.heartbeat)):
            return f"the sweep's heartbeat stopped for {self.sweep.lost_seconds:g} s"
        if self.running is None and time.monotonic() - self.idle_since > self.idle_seconds:
            return f"nothing to run for {self.idle_seconds:g} s"
        if self.running is None and self.too_little_time:
            return self.too_little_time
        if self.running is None and self.spool.retire(self.name).exists():
            return "retired to make room for a pilot that can run a waiting job"
        return ""

    def seconds_left(self) -> float:
        return self.ends_at - time.monotonic() - SAFETY_SECONDS

    # -- taking a job ----------------------------------------------------------------------------

    def _take(self) -> None:
        for request_id, path in self.spool.waiting():
            try:
                request = PilotRequest.model_validate_json(path.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue  # taken by another pilot meanwhile
            if not self.needs.holds(request.needs):
                continue
            if request.runtime_minutes * 60 > self.seconds_left():
                self.too_little_time = (
                    f"{self.seconds_left() / 60:.0f} min left, less than a job's {request.runtime_minutes:g} min"
                )
                continue
            claimed = self.spool.claimed(request_id, self.name)
            try:
                os.rename(path, claimed)  # atomic: of the pilots that try, one takes it
            except FileNotFoundError:
                continue
            self._start(request_id, request)
            return

    def _start(self, request_id: str, request: PilotRequest) -> None:
        from spica_lib.host.registry import JOBS
        from spica_lib.run.job import JobArgs

        job = JobArgs.model_validate(request.args)
        prepare = JOBS[request.job][1]
        started = time.perf_counter()
        if prepare is not None:
            try:
                prepare(job)  # here, not in the child: every later job of its kind forks with it done
            except BaseException:  # noqa: BLE001 - the job's problem (it meets it again and logs it), not the pilot's
                traceback.print_exc()
        prepare_seconds = time.perf_counter() - started
        descriptors = [
            os.open(self.spool.output(request_id, stream), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            for stream in ("out", "err")
        ]
        # The job keeps the rule script's variables, except that it runs inside this SLURM job.
        env = {name: value for name, value in request.env.items() if not name.startswith("SLURM_")}
        env.update({name: value for name, value in os.environ.items() if name.startswith("SLURM_")})
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            from spica_lib.host.server import run_forked_job

            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            run_forked_job(request.job, job, request.cwd, env, descriptors, prepare_seconds, pilot=self.name)
        for descriptor in descriptors:
            os.close(descriptor)
        with contextlib.suppress(OSError):
            os.setpgid(pid, pid)
        with self.lock:
            self.running = _Running(request_id=request_id, pid=pid)
        print(f"spica pilot {self.name}: {request.job} job {request_id} started", flush=True)

    # -- a job's end -----------------------------------------------------------------------------

    def _watch_cancel(self) -> None:
        running = self.running
        if running is None:
            return
        now = time.monotonic()
        if running.stop_deadline is None and self.spool.cancel(running.request_id).exists():
            running.stop_deadline, running.reason = now + STOP_GRACE_SECONDS, "its rule script was stopped"
            signal_group(running.pid, signal.SIGTERM)
        elif running.stop_deadline is not None and now > running.stop_deadline:
            signal_group(running.pid, signal.SIGKILL)

    def _reap(self) -> None:
        running = self.running
        if running is None:
            return
        ended, status = os.waitpid(running.pid, os.WNOHANG)
        if ended == 0:
            return
        code = os.waitstatus_to_exitcode(status)
        self._report(running, code if code >= 0 else 128 - code, running.reason)

    def _report(self, running: _Running, code: int, reason: str) -> None:
        with contextlib.suppress(OSError):
            write_model_file(
                self.spool.result(running.request_id), PilotResult(exit=code, pilot=self.name, reason=reason)
            )
        print(f"spica pilot {self.name}: job {running.request_id} ended, exit {code} {reason}".rstrip(), flush=True)
        with self.lock:
            self.running = None
        self.idle_since = time.monotonic()

    def stop_running(self, reason: str) -> None:
        """On the way out: stop the job it runs (SIGTERM, then SIGKILL) and report it lost."""
        running = self.running
        if running is None:
            return
        signal_group(running.pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_SECONDS
        while time.monotonic() < deadline and os.waitpid(running.pid, os.WNOHANG)[0] == 0:
            time.sleep(POLL_SECONDS)
        signal_group(running.pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(running.pid, 0)
        self._report(running, 1, f"pilot job {self.name} was stopped while it ran this job: {reason}")

    # -- the beat --------------------------------------------------------------------------------

    def beat(self) -> None:
        with self.lock:
            running = self.running.request_id if self.running else None
        self.beats += 1
        beat = PilotBeat(
            beat=self.beats,
            pilot=self.name,
            node=socket.gethostname(),
            needs=self.needs,
            running=running,
            seconds_left=self.seconds_left(),
            gone=self.gone,
        )
        with contextlib.suppress(OSError):  # the spool may be gone: the loop notices and ends
            write_model_file(self.spool.beat(self.name), beat)


def _beat_until(pilot: Pilot, done: threading.Event) -> None:
    while not done.wait(BEAT_SECONDS):
        pilot.beat()


def _raise_stop(signum: int, frame: object) -> None:
    raise _Stop()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m spica_lib.pilot.node")
    parser.add_argument("spool")
    parser.add_argument("--needs", required=True, help="the PilotClass it was submitted with, as JSON")
    parser.add_argument("--minutes", type=float, required=True)
    parser.add_argument("--idle-seconds", type=float, required=True)
    parser.add_argument("--sweep-lost-seconds", type=float, default=SWEEP_LOST_SECONDS)
    args = parser.parse_args(argv)
    name = os.environ.get("SLURM_JOB_ID") or f"local{os.getpid()}"
    needs = PilotClass.model_validate_json(args.needs)
    pilot = Pilot(Spool(args.spool), needs, args.minutes, args.idle_seconds, name, args.sweep_lost_seconds)
    signal.signal(signal.SIGTERM, _raise_stop)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    pilot.beat()
    done = threading.Event()
    threading.Thread(target=_beat_until, args=(pilot, done), name="spica-pilot-beat", daemon=True).start()
    try:
        from spica_lib.host.registry import preload

        preload()
        pilot.serve()
    except _Stop:
        pilot.gone = "stopped by SIGTERM (scancel, preemption or its time limit)"
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the way out is not interrupted again
        pilot.stop_running(pilot.gone or "the pilot failed")
        done.set()
        pilot.beat()
        print(f"spica pilot {name}: ending: {pilot.gone}", flush=True)


if __name__ == "__main__":
    main()
