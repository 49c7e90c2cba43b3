"""The spool folder that joins a sweep to its pilot jobs, on the file system the cluster shares.

One folder per sweep process, `<run>/.pilot/<sweep>/`, made 0700 so no other user can hand a
pilot a job or read one:

    heartbeat               the sweep's keeper rewrites it every second (a pilot whose sweep is gone ends)
    stop                    written when the sweep ends: every pilot ends
    requests/<id>.json      a job waiting for a pilot (PilotRequest), written by the rule script
    claimed/<id>.<pilot>.json   the same file, renamed by the pilot that took it (rename is atomic:
                            one pilot wins)
    output/<id>.out, .err   the job's stdout and stderr, which the rule script prints when it ends
    results/<id>.json       how the job ended (PilotResult)
    cancel/<id>             the rule script was stopped: the pilot stops the job
    pilots/<pilot>.json     each pilot's beat (PilotBeat), rewritten every second while it lives
    pilots/<pilot>.retire   the keeper needs room for a bigger pilot: this one ends when idle

Liveness is read from a beat's counter changing, on the reader's own clock, so the nodes' clocks
need not agree.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from spica_lib.base.artifacts import atomic_write_text

SPOOL_VARIABLE = "SPICA_PILOT_SPOOL"  # set by the keeper's launcher; the rule scripts hand their jobs to it
BEAT_SECONDS = 1.0
LOST_SECONDS = 30.0  # a beat unchanged this long (reader's clock): its writer is gone (node lost, SIGKILL)
POLL_SECONDS = 0.05


class PilotClass(BaseModel):
    """What a pilot job asks SLURM for; a pilot runs only the jobs that asked for the same."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    cpus: int
    mem_mb: int
    partition: str | None = None
    account: str | None = None
    gres: str | None = None

    def holds(self, job: PilotClass) -> bool:
        """A pilot of this class can run a job that asked for `job`: as many CPUs and as much memory, the same rest."""
        same = (self.partition, self.account, self.gres) == (job.partition, job.account, job.gres)
        return same and self.cpus >= job.cpus and self.mem_mb >= job.mem_mb

    def sbatch_options(self) -> list[str]:
        options = [f"--cpus-per-task={self.cpus}", f"--mem={self.mem_mb}"]
        options += [f"--partition={self.partition}"] if self.partition else []
        options += [f"--account={self.account}"] if self.account else []
        options += [f"--gres={self.gres}"] if self.gres else []
        return options


class PilotRequest(BaseModel):
    """A job a rule script hands to a pilot: the same request the local warm host takes, plus its needs."""

    model_config = ConfigDict(extra="forbid")

    job: str
    args: dict[str, Any]
    cwd: str
    env: dict[str, str]
    needs: PilotClass
    runtime_minutes: float  # the job's own time limit: a pilot with less time left does not take it


class PilotResult(BaseModel):
    """How a job a pilot ran ended."""

    model_config = ConfigDict(extra="forbid")

    exit: int
    pilot: str
    reason: str = ""  # why, when the pilot stopped it rather than the job ending by itself


class PilotBeat(BaseModel):
    """A pilot's heartbeat: its counter, what it runs, what it can still take."""

    model_config = ConfigDict(extra="forbid")

    beat: int
    pilot: str
    node: str
    needs: PilotClass
    running: str | None = None  # the request id it runs
    seconds_left: float
    gone: str = ""  # why it ended; set in its last beat


class Spool:
    """The paths of one sweep's spool folder."""

    def __init__(self, root: str | Path):
        self.root = Path(root)

    def create(self) -> Spool:
        for folder in ("requests", "claimed", "output", "results", "cancel", "pilots"):
            (self.root / folder).mkdir(parents=True, exist_ok=True)
        for path in [self.root, self.root.parent]:
            os.chmod(path, 0o700)
        return self

    def exists(self) -> bool:
        return self.root.is_dir()

    def remove(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)

    @property
    def heartbeat(self) -> Path:
        return self.root / "heartbeat"

    @property
    def stop_file(self) -> Path:
        return self.root / "stop"

    def request(self, request_id: str) -> Path:
        return self.root / "requests" / f"{request_id}.json"

    def claimed(self, request_id: str, pilot: str) -> Path:
        return self.root / "claimed" / f"{request_id}.{pilot}.json"

    def claim_of(self, request_id: str) -> tuple[Path, str] | None:
        """(claimed file, pilot) of a request a pilot took, or None."""
        for path in (self.root / "claimed").glob(f"{request_id}.*.json"):
            return path, path.name[len(request_id) + 1 : -len(".json")]
        return None

    def output(self, request_id: str, stream: str) -> Path:
        return self.root / "output" / f"{request_id}.{stream}"

    def result(self, request_id: str) -> Path:
        return self.root / "results" / f"{request_id}.json"

    def cancel(self, request_id: str) -> Path:
        return self.root / "cancel" / request_id

    def beat(self, pilot: str) -> Path:
        return self.root / "pilots" / f"{pilot}.json"

    def retire(self, pilot: str) -> Path:
        return self.root / "pilots" / f"{pilot}.retire"

    def waiting(self) -> list[tuple[str, Path]]:
        """(request id, file) of the requests no pilot has taken, oldest first."""
        paths = [p for p in (self.root / "requests").glob("*.json") if not p.name.startswith(".")]
        return sorted(((p.stem, p) for p in paths), key=lambda item: item[0])

    def beats(self) -> dict[str, PilotBeat]:
        found = {}
        for path in (self.root / "pilots").glob("*.json"):
            beat = read_beat(path)
            if beat is not None:
                found[beat.pilot] = beat
        return found

    def clear_done(self, request_id: str) -> None:
        for path in (self.result(request_id), self.output(request_id, "out"), self.output(request_id, "err"),
                     self.cancel(request_id), self.request(request_id)):  # fmt: skip
            path.unlink(missing_ok=True)
        claim = self.claim_of(request_id)
        if claim is not None:
            claim[0].unlink(missing_ok=True)


def read_beat(path: Path) -> PilotBeat | None:
    with contextlib.suppress(OSError, ValueError):
        return PilotBeat.model_validate_json(path.read_text(encoding="utf-8"))
    return None


def write_model_file(path: Path, model: BaseModel) -> None:
    atomic_write_text(path, model.model_dump_json())


class Liveness:
    """Whether a counter someone rewrites keeps changing, by this process's clock."""

    def __init__(self, lost_seconds: float | None = None):
        self.lost_seconds = LOST_SECONDS if lost_seconds is None else lost_seconds
        self.last: str | None = None
        self.changed = time.monotonic()

    def alive(self, current: str | None) -> bool:
        now = time.monotonic()
        if current is not None and current != self.last:
            self.last, self.changed = current, now
        return now - self.changed < self.lost_seconds


def read_text(path: Path) -> str | None:
    with contextlib.suppress(OSError):
        return path.read_text(encoding="utf-8")
    return None
