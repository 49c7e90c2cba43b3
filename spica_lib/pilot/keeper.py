"""The keeper: the sweep's side of its pilots, a child of the Snakemake process that runs the sweep.

    python -m spica_lib.pilot.keeper OWNER_PID SPOOL --settings JSON --log-dir DIR [--sweep-owner PID]

It rewrites the spool's heartbeat every second (pilots end when it stops), submits a pilot with
`sbatch` whenever a request waits that no idle or starting pilot of its kind can take (at most
`pilots` at once), and forgets pilots that ended or that SLURM no longer lists. When the sweep ends,
or the Snakemake process dies (the kernel sends the keeper SIGTERM then), it writes the stop file,
`scancel`s every pilot it submitted and removes the spool. It runs in its own session, so a signal
to the terminal's process group reaches Snakemake, whose death then reaches the keeper. When `spica run`
(`--sweep-owner`) dies, even by SIGKILL, Snakemake is only asked to finish the jobs it runs, and a job waiting
for a pilot SLURM keeps pending would keep it (and every helper) alive for ever: the keeper then stops the
same way, and sends Snakemake SIGINT, as a Ctrl-C would, so it cancels its own SLURM jobs and ends too.

Only its stop ends it: an I/O error on the shared file system (ESTALE, EIO) is logged and the step
that met it is tried again on the next pass. A pilot a rule script gave up on (`pilots/<id>.abandon`)
is `scancel`led, again every `SQUEUE_SECONDS` while SLURM lists it; once SLURM no longer does, the
keeper writes `pilots/<id>.ended`, and the rule script may fail its job for Snakemake to retry. A
job a fresh pilot submitted for it would not take (its start-up took more than the allowance, or
the partition gives less time than asked) fails with that reason instead of having pilots
submitted for it again and again.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import psutil

from spica_lib.base.lifetime import die_with_parent
from spica_lib.pilot.settings import PilotSettings
from spica_lib.pilot.spool import (
    BEAT_SECONDS,
    PilotBeat,
    PilotClass,
    PilotRequest,
    PilotResult,
    PrivacyError,
    Spool,
    read_request,
    touch_private,
    write_model_file,
    write_private,
)
from spica_lib.pilot.time_left import SAFETY_SECONDS, pilot_minutes

LOOP_SECONDS = 0.1
SQUEUE_SECONDS = 10.0
COMMAND_SECONDS = 30.0
STOP_WAIT_SECONDS = 10.0  # for the running pilots to end on the stop file before they are scancelled
ABANDON_CHECK_SECONDS = 1.0  # how often squeue is asked whether a pilot given up on is gone
TROUBLE_LOG_SECONDS = 10.0  # the same error of the same step is logged again after this long
# Why SLURM keeps a job pending when it will never start it as asked (squeue %r): the job exceeds a limit.
# PartitionConfig: it asks more than any node of its partition has (memory or CPUs; seen on SLURM 22.05 for a
# pilot asking more memory than the node's RealMemory).
NEVER_STARTS = (
    "PartitionTimeLimit",
    "PartitionNodeLimit",
    "PartitionConfig",
    "QOSMaxWallDurationPerJobLimit",
    "AccountNotAllowed",
)


class _Stop(BaseException):
    pass


# SIGTERM (the dying Snakemake's, or the launcher's stop) is only noted, and the keeper stops between steps:
# raised inside a step it could cut an sbatch that SLURM has already accepted, and the pilot whose id the keeper
# never read would stay queued after the sweep.
_stop_asked = False


class Keeper:
    def __init__(
        self, spool: Spool, settings: PilotSettings, log_dir: Path, snakemake: int = 0, sweep_owner: int | None = None
    ):
        self.spool, self.settings, self.log_dir = spool, settings, log_dir
        self.snakemake = snakemake  # the Snakemake process running the sweep (the keeper's parent)
        self.sweep_owner = sweep_owner  # `spica run`'s pid, when it started the sweep
        self.owner_started = None if sweep_owner is None else _started(sweep_owner)
        self.submitted: dict[str, PilotClass] = {}
        self.minutes_of: dict[str, int] = {}  # each pilot's time limit as submitted
        self.scancelled: dict[str, float] = {}  # pilots given up on -> when they were last scancelled
        self.checked: dict[str, float] = {}  # ... and last looked up
        self.refusals: set[str] = set()  # pilots whose goodbye (a job refused for time) was looked at
        self.troubles: dict[str, tuple[str, float]] = {}  # step -> its last error logged, when
        self.beats = 0
        self.next_beat = 0.0
        self.next_squeue = time.monotonic() + SQUEUE_SECONDS

    def serve(self) -> None:
        """Each pass runs every step; an I/O error ends only that step's pass (its next pass tries again)."""
        steps: list[Callable[[float], None]] = [
            self._end_without_owner, self._beat, self._forget_unlisted_now_and_then, self._end_abandoned,
            self._fail_refused, self._submit_as_needed,
        ]  # fmt: skip
        while True:
            now = time.monotonic()
            for step in steps:
                if _stop_asked:
                    raise _Stop()
                try:
                    step(now)
                except OSError as error:
                    self._trouble(step.__name__.strip("_"), error)
            time.sleep(LOOP_SECONDS)

    def _trouble(self, step: str, error: OSError) -> None:
        now = time.monotonic()
        last = self.troubles.get(step)
        if last is None or last[0] != str(error) or now - last[1] >= TROUBLE_LOG_SECONDS:
            print(f"spica keeper: {step.replace('_', ' ')}: {error} (tried again on the next pass)",
                  file=sys.stderr, flush=True)  # fmt: skip
            self.troubles[step] = (str(error), now)

    def _end_without_owner(self, now: float) -> None:
        """`spica run` is gone: the sweep has no one left to report to, so its pilots end now (see the module)."""
        if self.sweep_owner is None:
            return
        if self.owner_started is not None and _started(self.sweep_owner) == self.owner_started:
            return
        print(f"spica keeper: spica run (pid {self.sweep_owner}) is gone: ending the pilots and the sweep",
              file=sys.stderr, flush=True)  # fmt: skip
        snakemake = os.getppid()
        if snakemake == self.snakemake:  # still ours (never init's pid, had Snakemake just died)
            with contextlib.suppress(ProcessLookupError):
                os.kill(snakemake, signal.SIGINT)  # cancel its SLURM jobs, stop waiting for the rest
        raise _Stop()

    def _beat(self, now: float) -> None:
        if now >= self.next_beat:
            self.beats += 1
            write_private(self.spool.heartbeat, str(self.beats))  # a failed write is tried again next pass
            self.next_beat = now + BEAT_SECONDS

    def _forget_unlisted_now_and_then(self, now: float) -> None:
        if now >= self.next_squeue:
            self.next_squeue = now + SQUEUE_SECONDS
            self._forget_unlisted()

    def _end_abandoned(self, now: float) -> None:
        """Pilots a rule script gave up on: scancel them, and say when SLURM no longer lists them."""
        for job in self.spool.abandoned():
            if self.spool.ended(job).exists():
                continue
            if job in self.submitted and now - self.scancelled.get(job, -SQUEUE_SECONDS) >= SQUEUE_SECONDS:
                why = (self.spool.abandon(job).read_text(encoding="utf-8") or "its beat stalled").strip()
                print(f"spica keeper: scancel of pilot job {job}: a rule script gave up on it ({why})", flush=True)
                _scancel([job])
                self.scancelled[job] = now
            if job in self.submitted and now - self.checked.get(job, -ABANDON_CHECK_SECONDS) < ABANDON_CHECK_SECONDS:
                continue
            self.checked[job] = now
            listed = _squeue([job]) if job in self.submitted else {}
            if listed is not None and job not in listed:
                self.submitted.pop(job, None)
                write_private(self.spool.ended(job), "SLURM no longer lists it")

    def _fail_refused(self, now: float) -> None:
        """A request the pilot submitted with enough time for it would not take (too little time left once it
        started) fails, saying so: any pilot submitted for it would do the same."""
        for job, beat in self.spool.beats().items():
            if not beat.gone or beat.refused is None or beat.jobs_run or job in self.refusals:
                continue
            self.refusals.add(job)
            path = self.spool.request(beat.refused)
            try:
                request = read_request(path)
            except (OSError, ValueError, PrivacyError):
                continue  # taken meanwhile
            minutes = pilot_minutes(request.runtime_minutes, self.settings.minutes)
            if self.minutes_of.get(job, 0) < minutes:
                continue  # it was sized for a shorter job: the pilot submitted for this one will have the time
            try:
                path.unlink()
            except FileNotFoundError:
                continue
            reason = (
                f"no pilot of {' '.join(request.needs.sbatch_options())} can take this job: pilot job {job}, "
                f"submitted with {self.minutes_of[job]} min for it, had {(beat.seconds_left + SAFETY_SECONDS) / 60:.1f} "
                f"min left once started, and a job of {request.runtime_minutes:g} min needs "
                f"{request.runtime_minutes + SAFETY_SECONDS / 60:g} ({beat.gone}). Lower the replay runtime, or "
                "give the pilots a partition with longer time limits"
            )
            print(f"spica keeper: request {beat.refused} fails: {reason}", file=sys.stderr, flush=True)
            write_model_file(self.spool.result(beat.refused), PilotResult(exit=1, pilot=job, reason=reason))

    def active(self, beats: dict[str, PilotBeat]) -> dict[str, PilotClass]:
        """The pilots submitted that have not said goodbye in `beats` (the spool's, read once by the caller)."""
        return {job: needs for job, needs in self.submitted.items() if not (job in beats and beats[job].gone)}

    def _submit_as_needed(self, now: float | None = None) -> None:
        """Each waiting request, oldest first, goes to a free pilot that can run it, or has one submitted for it.

        Idle pilots too small for every job that waits for a pilot to start are retired: they would hold
        the CPUs (or a place under the limit) that the pilot for those jobs needs.
        """
        waiting: list[PilotRequest] = []
        for _, path in self.spool.waiting():
            with contextlib.suppress(OSError, ValueError, PrivacyError):  # taken meanwhile, or not the user's own
                waiting.append(read_request(path))
        if not waiting:
            return
        beats = self.spool.beats()
        active = self.active(beats)
        free = [job for job in active if job not in beats or beats[job].running is None]  # idle or starting
        starved = []  # requests no running pilot will take now: they wait for a pilot to start
        for request in waiting:
            taker = next((job for job in free if active[job].holds(request.needs)), None)
            if taker is not None:
                free.remove(taker)
                if taker in beats:
                    continue
            starved.append(request)
            if taker is None and len(active) < self.settings.pilots:
                minutes = pilot_minutes(request.runtime_minutes, self.settings.minutes)
                job = self._submit(request.needs, minutes)
                if job is not None:
                    active[job] = request.needs
        # An idle pilot that can run none of them holds CPUs (or a place under the limit) their pilot may need.
        for job in free:
            if job in beats and starved and not any(active[job].holds(r.needs) for r in starved):
                touch_private(self.spool.retire(job))

    def _submit(self, needs: PilotClass, minutes: int) -> str | None:
        command = [
            sys.executable, "-m", "spica_lib.pilot.node", str(self.spool.root),
            "--needs", needs.model_dump_json(), "--minutes", str(minutes),
            "--idle-seconds", str(self.settings.idle_seconds),
        ]  # fmt: skip
        self.log_dir.mkdir(parents=True, exist_ok=True)
        sbatch = [
            "sbatch", "--parsable", "--job-name=spica-pilot", "--no-requeue", f"--time={minutes}",
            f"--output={self.log_dir / 'pilot-%j.log'}", *needs.sbatch_options(),
            "--wrap", "exec " + shlex.join(command),
        ]  # fmt: skip
        try:
            done = subprocess.run(sbatch, capture_output=True, text=True, timeout=COMMAND_SECONDS, check=False)
        except (OSError, subprocess.TimeoutExpired) as error:
            return self._refuse(needs, f"sbatch failed: {error}")
        if done.returncode != 0:
            return self._refuse(needs, f"sbatch failed: {done.stderr.strip() or done.stdout.strip()}")
        job = done.stdout.strip().split(";")[0]
        self.submitted[job] = needs
        self.minutes_of[job] = minutes
        options = " ".join(needs.sbatch_options())
        print(f"spica keeper: submitted pilot job {job} ({options}, {minutes} min)", flush=True)
        return job

    def _refuse(self, needs: PilotClass, reason: str) -> None:
        """SLURM would not take a pilot: the requests that wanted one fail, saying why (Snakemake may retry them)."""
        print(f"spica keeper: {reason}", file=sys.stderr, flush=True)
        for request_id, path in self.spool.waiting():
            with contextlib.suppress(OSError, ValueError, PrivacyError):
                if read_request(path).needs == needs:
                    path.unlink()
                    write_model_file(self.spool.result(request_id), PilotResult(exit=1, pilot="", reason=reason))
        return None

    def _forget_unlisted(self) -> None:
        """Pilots SLURM no longer lists (ended, or lost with their node) are no longer counted."""
        if not self.submitted:
            return
        listed = _squeue(list(self.submitted))
        if listed is None:
            return
        for job in [job for job in self.submitted if job not in listed]:
            del self.submitted[job]
        for job, reason in listed.items():
            if reason in NEVER_STARTS and job in self.submitted:
                self._give_up_pending(job, reason)

    def _give_up_pending(self, job: str, reason: str) -> None:
        """A pilot SLURM will never start (it asked for more than its partition allows): scancel it, and fail the
        waiting jobs that would need one as big, saying why, rather than have them wait for it for ever."""
        needs, minutes = self.submitted.pop(job), self.minutes_of.get(job, 0)
        _scancel([job])
        why = (f"SLURM will not start pilot job {job} ({' '.join(needs.sbatch_options())}, {minutes} min): "
               f"pending for {reason}. No pilot of that size and time can run this job; lower the replay runtime or "
               "give the pilots a partition that allows it")  # fmt: skip
        print(f"spica keeper: {why}", file=sys.stderr, flush=True)
        for request_id, path in self.spool.waiting():
            with contextlib.suppress(OSError, ValueError, PrivacyError):
                request = read_request(path)
                if request.needs == needs and pilot_minutes(request.runtime_minutes, self.settings.minutes) >= minutes:
                    path.unlink()
                    write_model_file(self.spool.result(request_id), PilotResult(exit=1, pilot=job, reason=why))

    def stop(self) -> None:
        """Pilots that run end by themselves on the stop file (their SLURM jobs complete); the rest are scancelled."""
        with contextlib.suppress(OSError):
            write_private(self.spool.stop_file, "stop")
        deadline = time.monotonic() + STOP_WAIT_SECONDS
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError):
                beats = self.spool.beats()
                if not any(job in beats for job in self.active(beats)):
                    break
            time.sleep(LOOP_SECONDS)
        # Pilots that said goodbye are leaving: a scancel would mark them CANCELLED.
        try:
            left = list(self.active(self.spool.beats()))
        except OSError:
            left = list(self.submitted)
        if left:
            _scancel(left)
        # Those that said goodbye are leaving: the sweep ends once SLURM no longer lists them (their processes
        # are gone), within the same allowance again.
        leaving = [job for job in self.submitted if job not in left]
        deadline = time.monotonic() + STOP_WAIT_SECONDS
        while leaving and time.monotonic() < deadline:
            listed = _squeue(leaving)
            if listed is not None and not listed:
                break
            time.sleep(0.5)
        self.spool.remove()
        with contextlib.suppress(OSError):
            self.spool.root.parent.rmdir()  # the run's .pilot folder, once no spool is left in it


def _scancel(jobs: list[str]) -> None:
    with contextlib.suppress(OSError, subprocess.TimeoutExpired):
        subprocess.run(["scancel", *jobs], capture_output=True, timeout=COMMAND_SECONDS, check=False)


def _squeue(jobs: list[str]) -> dict[str, str] | None:
    """The jobs SLURM lists, each with the reason it is pending ("" once it runs), or None when squeue cannot say."""
    try:
        done = subprocess.run(
            ["squeue", "-h", "-o", "%i %T %r", "-j", ",".join(jobs)],
            capture_output=True, text=True, timeout=COMMAND_SECONDS, check=False,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0 and "Invalid job id" not in done.stderr:
        return None
    listed = {}
    for line in done.stdout.splitlines():
        job, state, reason = ([*line.split(None, 2), "", ""])[:3]
        if job:
            listed[job] = reason.strip() if state == "PENDING" else ""
    return listed


def _started(pid: int) -> float | None:
    """When process `pid` started (None: there is none): a pid reused by another process starts later."""
    try:
        return psutil.Process(pid).create_time()
    except psutil.NoSuchProcess:
        return None


def _ask_stop(signum: int, frame: object) -> None:
    global _stop_asked
    _stop_asked = True


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m spica_lib.pilot.keeper")
    parser.add_argument("owner", type=int)
    parser.add_argument("spool")
    parser.add_argument("--settings", required=True)
    parser.add_argument("--log-dir", required=True)
    parser.add_argument("--sweep-owner", type=int, help="the pid of `spica run`, when it started the sweep")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, _ask_stop)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    die_with_parent(args.owner, signal.SIGTERM)
    settings = PilotSettings.model_validate_json(args.settings)
    keeper = Keeper(Spool(args.spool), settings, Path(args.log_dir), args.owner, args.sweep_owner)
    try:
        keeper.serve()
    except _Stop:
        pass
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        keeper.stop()


if __name__ == "__main__":
    main()
