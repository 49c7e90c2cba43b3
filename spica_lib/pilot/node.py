"""A pilot: the SLURM job that holds a warm host on a compute node for as long as the sweep has work for it.

    python -m spica_lib.pilot.node SPOOL --needs JSON --minutes M --idle-seconds S

It imports Dynamo and Vizier once, then takes the spool's requests that asked for what it has
(PilotClass), one at a time: each job's warm-up runs here (so later jobs fork warm) and the job
itself in a forked child, exactly as in the sweep's local warm host. A trial there pays its replay,
not a SLURM submission, a Snakemake start and a warm-up.

It takes no job before it has seen the sweep's heartbeat change once (a first reading may be a dead
keeper's last). It ends by itself when the sweep ends (stop file, or spool gone), when the sweep's
heartbeat stops (the machine running Snakemake died), when a rule script gave up on it, when
`BEAT_FAILURES` beat writes in a row fail (the rule scripts cannot see it alive: better it stops its
job than run it beside a retry), when it cannot write a job's result, when it has had nothing to
run for `idle_seconds` (it frees its node between rounds), or when the time SLURM says it has left
is less than the next job's. It checks all of these while a job warms up too. A job whose claim
file is gone (its rule script no longer waits for it) is stopped. After a warm-up hung (its thread
may hold Dynamo's locks) it forks nothing more and ends. SIGTERM (scancel, preemption, the time
limit) stops the job it runs and reports that job as lost, so its rule script fails and Snakemake
retries it (another pilot); a node lost outright is noticed by its beat going quiet. No process
outlives it: the job child dies with it (`PR_SET_PDEATHSIG`), the job's replays with the job.
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
from dataclasses import dataclass, field
from typing import Any

from spica_lib.base.lifetime import signal_group
from spica_lib.host.client import job_environment
from spica_lib.host.forked_job import prepare_job, run_forked_job
from spica_lib.pilot.spool import (
    BEAT_SECONDS,
    POLL_SECONDS,
    Liveness,
    PilotBeat,
    PilotClass,
    PilotRequest,
    PilotResult,
    PrivacyError,
    Spool,
    read_request,
    read_text,
    write_model_file,
)
from spica_lib.pilot.time_left import SAFETY_SECONDS, STARTUP_SECONDS, slurm_time_left

SWEEP_LOST_SECONDS = 60.0  # the sweep's heartbeat unchanged this long: its machine is gone
STOP_GRACE_SECONDS = 5.0
BEAT_FAILURES = 5  # beat writes failed in a row (5 s) before a pilot ends: well inside a rule script's 30 s
CLAIM_CHECKS = 2  # a running job's claim file missing at this many checks in a row (1 s apart): stop the job
RESULT_TRIES = 3  # attempts at writing a job's result (1 s apart) before the pilot ends
TIME_LEFT_TRIES = 3


class _Stop(BaseException):
    """SIGTERM: SLURM is ending this pilot."""


@dataclass
class _Running:
    """The job a pilot has claimed: warming up (no pid yet), then running in its forked child."""

    request_id: str
    pid: int | None = None
    stop_deadline: float | None = None
    reason: str = ""
    report: bool = True  # False once its claim is gone: no rule script waits for a result


@dataclass
class _WarmUp:
    request_id: str
    request: PilotRequest
    job: Any
    thread: threading.Thread
    started: float = field(default_factory=time.perf_counter)


class Pilot:
    def __init__(
        self,
        spool: Spool,
        needs: PilotClass,
        minutes: float,
        idle_seconds: float,
        name: str,
        sweep_lost_seconds: float = SWEEP_LOST_SECONDS,
        slurm_job: str | None = None,
    ):
        self.spool, self.needs, self.idle_seconds, self.name = spool, needs, idle_seconds, name
        self.minutes, self.slurm_job = minutes, slurm_job
        self.started = time.monotonic()
        self.ends_at = self.started + minutes * 60
        self.sweep = Liveness(sweep_lost_seconds)
        self.running: _Running | None = None
        self.warming: _WarmUp | None = None
        self.idle_since = time.monotonic()
        self.too_little_time = ""
        self.refused: str | None = None
        self.trouble = ""  # a spool write it cannot do, or an unsafe spool: it ends
        self.hung = ""
        self.gone = ""
        self.beats = 0
        self.beat_failures = 0
        self.jobs_run = 0
        self.claim_missing = 0
        self.next_claim_check = 0.0
        self.foreign: set[str] = set()
        self.lock = threading.Lock()

    def read_time_left(self) -> None:
        """Its end, from the time SLURM says its job has left (asked once it is ready, so its start-up is counted).

        When squeue cannot say, its `minutes` are counted from its own start less the start-up
        allowance the keeper asked for: the start-up is assumed to have taken all of it.
        """
        if self.slurm_job is None:
            return
        for attempt in range(TIME_LEFT_TRIES):
            seconds = slurm_time_left(self.slurm_job)
            if seconds is not None:
                self.ends_at = time.monotonic() + seconds
                print(f"spica pilot {self.name}: SLURM says {seconds:.0f} s left", flush=True)
                return
            if attempt + 1 < TIME_LEFT_TRIES:
                time.sleep(1.0)
        self.ends_at = self.started + self.minutes * 60 - STARTUP_SECONDS
        print(f"spica pilot {self.name}: squeue gave no time left; counting {self.minutes:g} min from its start, "
              f"less {STARTUP_SECONDS:g} s of start-up", flush=True)  # fmt: skip

    # -- the loop --------------------------------------------------------------------------------

    def serve(self) -> None:
        while not self.gone:
            self.gone = self._reason_to_end()
            if self.gone:
                break
            self._watch_cancel()
            self._watch_claim()
            self._advance_warm_up()
            self._reap()
            if self.running is None and self.warming is None and not self.hung and self.sweep.changed:
                self._take()
            time.sleep(POLL_SECONDS)

    def _reason_to_end(self) -> str:
        if not self.spool.exists():
            return "its sweep's spool folder is gone"
        if self.spool.stop_file.exists():
            return "the sweep ended"
        if not self.sweep.alive(read_text(self.spool.heartbeat)):
            return f"the sweep's heartbeat stopped for {self.sweep.lost_seconds:g} s"
        if self.spool.abandon(self.name).exists():
            return "a rule script gave up on it (its beat had stalled)"
        if self.trouble:
            return self.trouble
        idle = self.running is None and self.warming is None
        if idle and self.hung:
            return self.hung
        if idle and time.monotonic() - self.idle_since > self.idle_seconds:
            return f"nothing to run for {self.idle_seconds:g} s"
        if idle and self.too_little_time:
            return self.too_little_time
        if idle and self.spool.retire(self.name).exists():
            return "retired to make room for a pilot that can run a waiting job"
        return ""

    def seconds_left(self) -> float:
        return self.ends_at - time.monotonic() - SAFETY_SECONDS

    # -- taking a job ----------------------------------------------------------------------------

    def _take(self) -> None:
        problem = self.spool.privacy_problem()
        if problem:
            self.trouble = f"its spool is not private ({problem}): it runs nothing from it"
            return
        for request_id, path in self.spool.waiting():
            try:
                request = read_request(path)
            except PrivacyError as error:
                if request_id not in self.foreign:
                    self.foreign.add(request_id)
                    print(f"spica pilot {self.name}: not taking request {request_id}: {error}", flush=True)
                continue
            except (OSError, ValueError):
                continue  # taken by another pilot meanwhile
            if not self.needs.holds(request.needs):
                continue
            if request.runtime_minutes * 60 > self.seconds_left():
                self.too_little_time = (
                    f"{self.seconds_left() / 60:.0f} min left, less than a job's {request.runtime_minutes:g} min"
                )
                self.refused = request_id
                continue
            claimed = self.spool.claimed(request_id, self.name)
            try:
                os.rename(path, claimed)  # atomic: of the pilots that try, one takes it
            except FileNotFoundError:
                # Gone: another pilot took it, or (NFS) a retransmitted rename that had succeeded answers
                # ENOENT to the winner. Only the claimed file under this pilot's name says which.
                if not _present(claimed):
                    continue
            self._begin(request_id, request)
            return

    def _begin(self, request_id: str, request: PilotRequest) -> None:
        from spica_lib.host.registry import JOBS
        from spica_lib.run.job_args import JobArgs

        self.too_little_time, self.refused = "", None
        with self.lock:
            self.running = _Running(request_id=request_id)
        self.claim_missing, self.next_claim_check = 0, time.monotonic() + BEAT_SECONDS
        try:
            job = JobArgs.model_validate(request.args)
            prepare = JOBS[request.job].prepare_step()
        except (KeyError, ValueError) as error:
            self._report(self.running, 1, f"pilot job {self.name} cannot run this request: {error}")
            return
        thread = threading.Thread(target=prepare_job, args=(prepare, job), name="spica-pilot-prepare", daemon=True)
        self.warming = _WarmUp(request_id=request_id, request=request, job=job, thread=thread)
        thread.start()  # on a thread: the loop goes on checking its end conditions, the cancel and the claim

    def _advance_warm_up(self) -> None:
        """A warm-up that ended: fork its job, unless it was cancelled meanwhile or the warm-up hung."""
        warming = self.warming
        if warming is None or warming.thread.is_alive():
            return
        self.warming = None
        running = self.running
        if running is None or running.request_id != warming.request_id or running.pid is not None:
            return  # stopped while it warmed up; it was reported then
        from spica_lib.replay.warm_up import hung

        if hung():  # the local warm host stops forking for the same reason (spica_lib.host.server)
            self.hung = "a warm-up hung in it (its thread may hold Dynamo's locks): it forks no more"
            self._report(running, 1, f"its warm-up hung in pilot job {self.name}, which forks no more jobs")
            return
        self._fork(running, warming)

    def _fork(self, running: _Running, warming: _WarmUp) -> None:
        request, request_id = warming.request, warming.request_id
        prepare_seconds = time.perf_counter() - warming.started
        try:
            descriptors = [
                os.open(self.spool.output(request_id, stream), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                for stream in ("out", "err")
            ]
        except OSError as error:
            self._report(running, 1, f"pilot job {self.name} could not open the job's output files ({error})")
            return
        # What the local host keeps of a caller's variables (one filter for both), except that the job
        # runs inside this SLURM job.
        env = {name: value for name, value in job_environment(request.env).items() if not name.startswith("SLURM_")}
        env.update({name: value for name, value in os.environ.items() if name.startswith("SLURM_")})
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            run_forked_job(request.job, warming.job, request.cwd, env, descriptors, prepare_seconds, pilot=self.name)
        for descriptor in descriptors:
            os.close(descriptor)
        with contextlib.suppress(OSError):
            os.setpgid(pid, pid)
        with self.lock:
            running.pid = pid
        self.jobs_run += 1
        print(f"spica pilot {self.name}: {request.job} job {request_id} started", flush=True)

    # -- a job's end -----------------------------------------------------------------------------

    def _watch_cancel(self) -> None:
        running = self.running
        if running is None:
            return
        now = time.monotonic()
        if running.stop_deadline is None and self.spool.cancel(running.request_id).exists():
            self._stop(running, "its rule script was stopped")
        elif running.stop_deadline is not None and now > running.stop_deadline and running.pid is not None:
            signal_group(running.pid, signal.SIGKILL)

    def _watch_claim(self) -> None:
        """Its rule script waits for a job as long as the job's claim file is there: a job without one is stopped."""
        running = self.running
        if running is None or running.stop_deadline is not None or time.monotonic() < self.next_claim_check:
            return
        self.next_claim_check = time.monotonic() + BEAT_SECONDS
        if _present(self.spool.claimed(running.request_id, self.name), missing_only=True):
            self.claim_missing = 0
            return
        self.claim_missing += 1
        if self.claim_missing >= CLAIM_CHECKS:
            running.report = False
            self._stop(running, "its claim file is gone (no rule script waits for it)")

    def _stop(self, running: _Running, reason: str) -> None:
        print(f"spica pilot {self.name}: stopping job {running.request_id}: {reason}", flush=True)
        if running.pid is None:  # still warming up: nothing forked; the warm-up ends on its own
            self._report(running, 1, reason)
            return
        running.stop_deadline, running.reason = time.monotonic() + STOP_GRACE_SECONDS, reason
        signal_group(running.pid, signal.SIGTERM)

    def _reap(self) -> None:
        running = self.running
        if running is None or running.pid is None:
            return
        ended, status = os.waitpid(running.pid, os.WNOHANG)
        if ended == 0:
            return
        code = os.waitstatus_to_exitcode(status)
        self._report(running, code if code >= 0 else 128 - code, running.reason)

    def _report(self, running: _Running, code: int, reason: str) -> None:
        """The job ended: its result for its rule script. A pilot that cannot write it ends (the job fails there)."""
        problem = ""
        for attempt in range(RESULT_TRIES if running.report else 0):
            try:
                result = PilotResult(exit=code, pilot=self.name, reason=reason)
                write_model_file(self.spool.result(running.request_id), result)
                problem = ""
                break
            except OSError as error:
                problem = f"could not write job {running.request_id}'s result ({error})"
                if attempt + 1 < RESULT_TRIES:
                    time.sleep(1.0)
        print(f"spica pilot {self.name}: job {running.request_id} ended, exit {code} {reason}".rstrip(), flush=True)
        with self.lock:
            self.running = None
        if problem:
            self.trouble = problem
        self.idle_since = time.monotonic()

    def stop_running(self, reason: str) -> None:
        """On the way out: stop the job it runs (SIGTERM, then SIGKILL) and report it lost."""
        running = self.running
        if running is None:
            return
        if running.pid is not None:
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
            jobs_run=self.jobs_run,
            refused=self.refused if self.gone and self.gone == self.too_little_time else None,
        )
        try:
            write_model_file(self.spool.beat(self.name), beat)
            self.beat_failures = 0
        except OSError as error:  # the spool may be gone (the loop notices and ends), or its file system ailing
            self.beat_failures += 1
            if self.beat_failures >= BEAT_FAILURES and not self.trouble:
                self.trouble = f"{self.beat_failures} beat writes in a row failed ({error})"


def _present(path: Any, missing_only: bool = False) -> bool:
    """Whether `path` exists; with `missing_only`, an error other than "no such file" (ESTALE) counts as present."""
    try:
        os.stat(path)
        return True
    except FileNotFoundError:
        return False
    except OSError:
        return missing_only


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
    slurm_job = os.environ.get("SLURM_JOB_ID") or None
    name = slurm_job or f"local{os.getpid()}"
    needs = PilotClass.model_validate_json(args.needs)
    pilot = Pilot(Spool(args.spool), needs, args.minutes, args.idle_seconds, name, args.sweep_lost_seconds, slurm_job)
    signal.signal(signal.SIGTERM, _raise_stop)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    pilot.beat()
    done = threading.Event()
    threading.Thread(target=_beat_until, args=(pilot, done), name="spica-pilot-beat", daemon=True).start()
    try:
        from spica_lib.host.registry import preload

        preload()
        pilot.read_time_left()
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
