"""The keeper: the sweep's side of its pilots, a child of the Snakemake process that runs the sweep.

    python -m spica_lib.pilot.keeper OWNER_PID SPOOL --settings JSON --log-dir DIR

It rewrites the spool's heartbeat every second (pilots end when it stops), submits a pilot with
`sbatch` whenever a request waits that no idle or starting pilot of its kind can take (at most
`pilots` at once), and forgets pilots that ended or that SLURM no longer lists. When the sweep ends,
or the Snakemake process dies (the kernel sends the keeper SIGTERM then), it writes the stop file,
`scancel`s every pilot it submitted and removes the spool. It runs in its own session, so a signal
to the terminal's process group reaches Snakemake, whose death then reaches the keeper.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

from spica_lib.base.artifacts import atomic_write_text
from spica_lib.base.lifetime import die_with_parent
from spica_lib.pilot.node import SAFETY_SECONDS
from spica_lib.pilot.settings import PilotSettings
from spica_lib.pilot.spool import (
    BEAT_SECONDS,
    PilotBeat,
    PilotClass,
    PilotRequest,
    PilotResult,
    Spool,
    write_model_file,
)

LOOP_SECONDS = 0.1
SQUEUE_SECONDS = 10.0
COMMAND_SECONDS = 30.0
STOP_WAIT_SECONDS = 10.0  # for the running pilots to end on the stop file before they are scancelled


class _Stop(BaseException):
    pass


class Keeper:
    def __init__(self, spool: Spool, settings: PilotSettings, log_dir: Path):
        self.spool, self.settings, self.log_dir = spool, settings, log_dir
        self.submitted: dict[str, PilotClass] = {}
        self.beats = 0
        self.next_beat = 0.0
        self.next_squeue = time.monotonic() + SQUEUE_SECONDS

    def serve(self) -> None:
        while True:
            now = time.monotonic()
            if now >= self.next_beat:
                self.beats += 1
                atomic_write_text(self.spool.heartbeat, str(self.beats))
                self.next_beat = now + BEAT_SECONDS
            if now >= self.next_squeue:
                self._forget_unlisted()
                self.next_squeue = now + SQUEUE_SECONDS
            self._submit_as_needed()
            time.sleep(LOOP_SECONDS)

    def active(self, beats: dict[str, PilotBeat]) -> dict[str, PilotClass]:
        """The pilots submitted that have not said goodbye in `beats` (the spool's, read once by the caller)."""
        return {job: needs for job, needs in self.submitted.items() if not (job in beats and beats[job].gone)}

    def _submit_as_needed(self) -> None:
        """Each waiting request, oldest first, goes to a free pilot that can run it, or has one submitted for it.

        Idle pilots too small for every job that waits for a pilot to start are retired: they would hold
        the CPUs (or a place under the limit) that the pilot for those jobs needs.
        """
        waiting = []
        for _, path in self.spool.waiting():
            with contextlib.suppress(OSError, ValueError):
                waiting.append(PilotRequest.model_validate_json(path.read_text(encoding="utf-8")))
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
                minutes = max(self.settings.minutes, math.ceil(request.runtime_minutes + SAFETY_SECONDS / 60 + 1))
                job = self._submit(request.needs, minutes)
                if job is not None:
                    active[job] = request.needs
        # An idle pilot that can run none of them holds CPUs (or a place under the limit) their pilot may need.
        for job in free:
            if job in beats and starved and not any(active[job].holds(r.needs) for r in starved):
                self.spool.retire(job).touch()

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
        options = " ".join(needs.sbatch_options())
        print(f"spica keeper: submitted pilot job {job} ({options}, {minutes} min)", flush=True)
        return job

    def _refuse(self, needs: PilotClass, reason: str) -> None:
        """SLURM would not take a pilot: the requests that wanted one fail, saying why (Snakemake may retry them)."""
        print(f"spica keeper: {reason}", file=sys.stderr, flush=True)
        for request_id, path in self.spool.waiting():
            with contextlib.suppress(OSError, ValueError):
                if PilotRequest.model_validate_json(path.read_text(encoding="utf-8")).needs == needs:
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

    def stop(self) -> None:
        """Pilots that run end by themselves on the stop file (their SLURM jobs complete); the rest are scancelled."""
        with contextlib.suppress(OSError):
            atomic_write_text(self.spool.stop_file, "stop")
        deadline = time.monotonic() + STOP_WAIT_SECONDS
        while time.monotonic() < deadline:
            beats = self.spool.beats()
            if not any(job in beats for job in self.active(beats)):
                break
            time.sleep(LOOP_SECONDS)
        # Pilots that said goodbye are leaving: a scancel would mark them CANCELLED.
        left = list(self.active(self.spool.beats()))
        if left:
            with contextlib.suppress(OSError, subprocess.TimeoutExpired):
                subprocess.run(["scancel", *left], capture_output=True, timeout=COMMAND_SECONDS, check=False)
        self.spool.remove()
        with contextlib.suppress(OSError):
            self.spool.root.parent.rmdir()  # the run's .pilot folder, once no spool is left in it


def _squeue(jobs: list[str]) -> set[str] | None:
    try:
        done = subprocess.run(
            ["squeue", "-h", "-o", "%i", "-j", ",".join(jobs)],
            capture_output=True, text=True, timeout=COMMAND_SECONDS, check=False,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0 and "Invalid job id" not in done.stderr:
        return None
    return set(done.stdout.split())


def _raise_stop(signum: int, frame: object) -> None:
    raise _Stop()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m spica_lib.pilot.keeper")
    parser.add_argument("owner", type=int)
    parser.add_argument("spool")
    parser.add_argument("--settings", required=True)
    parser.add_argument("--log-dir", required=True)
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, _raise_stop)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    die_with_parent(args.owner, signal.SIGTERM)
    keeper = Keeper(Spool(args.spool), PilotSettings.model_validate_json(args.settings), Path(args.log_dir))
    try:
        keeper.serve()
    except _Stop:
        pass
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        keeper.stop()


if __name__ == "__main__":
    main()
