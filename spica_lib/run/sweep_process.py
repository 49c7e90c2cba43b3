"""Which Snakemake is running a sweep now, so `spica status` can tell a running sweep from a stopped one.

The Snakefile's `onstart` writes `sweep_process.json` in the run folder (the main Snakemake's pid,
host and start time) and its `onsuccess` / `onerror` remove it. A sweep killed hard (SIGKILL, a
lost login session) leaves it behind, naming a process that is gone: the sweep is then "stopped",
and its trials that were replaying when it died are "interrupted", not running.

A run started again clears the temporaries its killed predecessor left (a `.tmp` beside an
artifact that was being written atomically). Snakemake's lock guarantees no other sweep works in
the folder then; a temporary is only taken when it was last written before the new sweep started,
so a straggling cluster job of the old one that is writing right now keeps its file.
"""

from __future__ import annotations

import contextlib
import os
import socket
from datetime import datetime, timezone
from pathlib import Path
from typing import Literal

import psutil
from pydantic import BaseModel, ConfigDict

from spica_lib.base.artifacts import TEMPORARY_SUFFIX, read_model, write_model
from spica_lib.run.layout import RunFiles

SweepState = Literal["running", "running elsewhere", "stopped", "finished", "not started"]


class SweepProcess(BaseModel):
    """`sweep_process.json`: the Snakemake process running this sweep, while it runs."""

    model_config = ConfigDict(extra="forbid")

    pid: int
    host: str
    process_started: float  # the process's start time (epoch seconds), so a reused pid is not taken for it
    started_at: str


def mark_running(run_dir: str | Path) -> SweepProcess:
    """In Snakemake's main process, as the sweep starts: write sweep_process.json."""
    me = psutil.Process()
    process = SweepProcess(
        pid=me.pid,
        host=socket.gethostname(),
        process_started=me.create_time(),
        started_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
    )
    Path(run_dir).mkdir(parents=True, exist_ok=True)
    write_model(RunFiles(dir=str(run_dir)).sweep_process_json, process)
    return process


def clear_mark(run_dir: str | Path) -> None:
    """As the sweep ends (well or not): it is no longer running."""
    Path(RunFiles(dir=str(run_dir)).sweep_process_json).unlink(missing_ok=True)


def running_process(run_dir: str | Path) -> SweepProcess | None:
    """The recorded Snakemake of this sweep, when there is a record."""
    path = Path(RunFiles(dir=str(run_dir)).sweep_process_json)
    return read_model(path, SweepProcess) if path.is_file() else None


def sweep_state(run_dir: str | Path, finished_file: str | Path) -> SweepState:
    """running (its Snakemake is alive), running elsewhere (on another host: cannot check), stopped, finished."""
    process = running_process(run_dir)
    if process is None:
        return "finished" if Path(finished_file).is_file() else ("stopped" if Path(run_dir).is_dir() else "not started")
    if process.host != socket.gethostname():
        return "running elsewhere"
    return "running" if _alive(process) else "stopped"


def _alive(process: SweepProcess) -> bool:
    try:
        found = psutil.Process(process.pid)
        # A killed Snakemake stays a zombie until something reaps it (a container's init may never).
        return abs(found.create_time() - process.process_started) < 1.0 and found.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def clear_stale_temporaries(run_dir: str | Path, sweep_started: float) -> list[Path]:
    """Remove the atomic writes' temporaries a killed sweep left in `run_dir` (last written before
    `sweep_started`, epoch seconds); return what was removed."""
    cutoff = sweep_started
    removed = []
    for path in Path(run_dir).rglob(f".*{TEMPORARY_SUFFIX}"):
        with contextlib.suppress(FileNotFoundError):
            if path.is_file() and path.stat().st_mtime < cutoff:
                os.unlink(path)
                removed.append(path)
    return removed
