"""The spool folder that joins a sweep to its pilot jobs, on the file system the cluster shares.

One folder per sweep process, `<run>/.pilot/<sweep>/`, private to its user throughout: every folder
is made 0700 and every file 0600 from its creation (never chmod-ed after), a write never makes a
missing folder (a spool removed under a writer stays removed), and a pilot reads a request only
when the spool and the file are its user's and no one else's (`read_request`):

    heartbeat               the sweep's keeper rewrites it every second (a pilot whose sweep is gone ends)
    stop                    written when the sweep ends: every pilot ends
    requests/<id>.json      a job waiting for a pilot (PilotRequest), written by the rule script
    claimed/<id>.<pilot>.json   the same file, renamed by the pilot that took it (rename is atomic:
                            one pilot wins)
    output/<id>.out, .err   the job's stdout and stderr, which the rule script prints when it ends
    results/<id>.json       how the job ended (PilotResult)
    cancel/<id>             the rule script was stopped, or gave up on the pilot: the pilot stops the job
    pilots/<pilot>.json     each pilot's beat (PilotBeat), rewritten every second while it lives
    pilots/<pilot>.retire   the keeper needs room for a bigger pilot: this one ends when idle
    pilots/<pilot>.abandon  a rule script gave up on this pilot (its beat stalled): the keeper scancels it,
                            and the pilot, should it wake, ends
    pilots/<pilot>.ended    the keeper's answer: SLURM no longer lists the pilot, so nothing of it runs

Liveness is read from a beat's counter changing, on the reader's own clock, so the nodes' clocks
need not agree.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from spica_lib.base.artifacts import atomic_write_text

BEAT_SECONDS = 1.0
FOLDERS = ("requests", "claimed", "output", "results", "cancel", "pilots")
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
    jobs_run: int = 0  # jobs it has forked
    refused: str | None = None  # the request it would not take for lack of time, if that is why it ends


class Spool:
    """The paths of one sweep's spool folder."""

    def __init__(self, root: str | Path):
        self.root = Path(root)

    def create(self) -> Spool:
        """Make the folders, each 0700 from its creation (the umask can only take bits away)."""
        self.root.parent.parent.mkdir(parents=True, exist_ok=True)  # the run folder: not the spool's
        for path in [self.root.parent, self.root, *(self.root / folder for folder in FOLDERS)]:
            with contextlib.suppress(FileExistsError):
                os.mkdir(path, 0o700)
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

    def abandon(self, pilot: str) -> Path:
        return self.root / "pilots" / f"{pilot}.abandon"

    def ended(self, pilot: str) -> Path:
        return self.root / "pilots" / f"{pilot}.ended"

    def abandoned(self) -> list[str]:
        """The pilots a rule script gave up on."""
        return sorted(path.name[: -len(".abandon")] for path in (self.root / "pilots").glob("*.abandon"))

    def privacy_problem(self) -> str:
        """Why the spool folder is not this user's private folder, or ""."""
        return _privacy_problem(self.root, stat.S_ISDIR)

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


def read_request(path: Path) -> PilotRequest:
    """The request in `path`, read only if it is a regular file of this user's that no one else may read or write.

    Raises OSError (gone meanwhile: another pilot took it), PrivacyError or ValueError (not a request).
    """
    descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(descriptor, encoding="utf-8") as source:
        problem = _privacy_problem(path, stat.S_ISREG, os.fstat(descriptor))
        if problem:
            raise PrivacyError(problem)
        return PilotRequest.model_validate_json(source.read())


class PrivacyError(Exception):
    """A spool file or folder another user could have written: it is not read."""


def _privacy_problem(path: Path, kind: Any, status: os.stat_result | None = None) -> str:
    try:
        status = status or os.lstat(path)
    except OSError as error:
        return f"{path} cannot be read ({error})"
    if not kind(status.st_mode):
        return f"{path} is not a {'folder' if kind is stat.S_ISDIR else 'regular file'}"
    if status.st_uid != os.getuid():
        return f"{path} belongs to uid {status.st_uid}, not to this user (uid {os.getuid()})"
    if status.st_mode & 0o077:
        return f"{path} has mode {stat.S_IMODE(status.st_mode):04o}; only its owner may read or write it (0700/0600)"
    return ""


def read_beat(path: Path) -> PilotBeat | None:
    with contextlib.suppress(OSError, ValueError):
        return PilotBeat.model_validate_json(path.read_text(encoding="utf-8"))
    return None


def write_model_file(path: Path, model: BaseModel) -> None:
    write_private(path, model.model_dump_json())


def write_private(path: Path, text: str) -> None:
    """Write a spool file atomically, 0600 from its creation; a missing folder raises FileNotFoundError."""
    atomic_write_text(path, text, private=True)


def touch_private(path: Path) -> None:
    """Make an empty spool file (a cancel, a retire), 0600 from its creation, its folder not made."""
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600))


class Liveness:
    """Whether a counter someone rewrites keeps changing, by this process's clock.

    `changed` says whether it has been seen to change at least once: a first reading alone may be a
    dead writer's last (a pilot that starts after its keeper was killed).
    """

    def __init__(self, lost_seconds: float | None = None):
        self.lost_seconds = LOST_SECONDS if lost_seconds is None else lost_seconds
        self.last: str | None = None
        self.readings = 0  # distinct values seen
        self.since = time.monotonic()

    def alive(self, current: str | None) -> bool:
        now = time.monotonic()
        if current is not None and current != self.last:
            self.last, self.since = current, now
            self.readings += 1
        return now - self.since < self.lost_seconds

    @property
    def changed(self) -> bool:
        return self.readings >= 2


def read_text(path: Path) -> str | None:
    with contextlib.suppress(OSError):
        return path.read_text(encoding="utf-8")
    return None
