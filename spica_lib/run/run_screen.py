"""What `spica run` puts on the screen: the progress view while Snakemake runs, the run's answer at the end.

Snakemake, its jobs and the warm host write to the run's `logs/snakemake.log`, never to the screen: their file
descriptors 1 and 2 are that file, so a job's print reaches it as surely as Snakemake's own records (under
SLURM a job's output stays in its SLURM log either way). The screen gets the progress view, which Snakemake's
logger plugin `spica` draws on a descriptor handed to it (snakemake_logger_plugin_spica), and then, from this
process, the answer (run/answer.py) or, when Snakemake failed, the log's last lines and its path. With
`verbose`, the log itself is followed onto the screen instead of the view.

A fleet (`spica fleet`) speaks the same way with its own `Voice`: its stages' lines instead of a sweep's view, its
plan as the answer; each model's sweep keeps its own log (fleet/jobs.py).
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import IO

from spica_lib.run.answer import answer_block
from spica_lib.run.layout import RunFiles

FAILURE_LINES = 15  # the last lines of Snakemake's log shown when it failed
FOLLOW_SECONDS = 0.2  # how often the log is looked at for new lines to show


@dataclass(frozen=True)
class Voice:
    """What one command says on the screen while its Snakemake runs, and once it has ended."""

    command: str  # "spica run": the log's headers and the failure's first line name it
    view: bool  # Snakemake's logger plugin `spica` draws a sweep's progress view
    says: Callable[[str], str | None] | None  # without the view: what a log line shows as it comes (its stages)
    answer: Callable[[Path], str | None]  # the answer, from the finished run's folder


SWEEP_VOICE = Voice(command="spica run", view=True, says=None, answer=answer_block)


@contextlib.contextmanager
def appended_log(log: Path, title: str) -> Iterator[tuple[IO[str], int]]:
    """The log opened for appending under a dated header `=== TITLE, started ... ===`, and where this part
    starts (a byte offset). Appended: running a finished run again (which finds nothing to do) must not erase
    the log of the invocation that did the work."""
    log.parent.mkdir(parents=True, exist_ok=True)
    start = log.stat().st_size if log.is_file() else 0
    with open(log, "a", encoding="utf-8") as written:
        gap = "\n" if start else ""  # a blank line between one invocation's log and the next
        written.write(f"{gap}=== {title}, started {_now()} ===\n")
        written.flush()
        yield written, start


def run_on_screen(
    command: list[str], run_dir: Path, verbose: bool, run_child, cwd: str | Path | None = None,
    voice: Voice = SWEEP_VOICE,
) -> int:  # fmt: skip
    """Run Snakemake's `command` (launcher.py's: `python -m spica_lib.run.snakemake_main ...`) for the run in
    `run_dir`; show its progress, then its answer. `run_child(command, cwd, stdout, pass_fds)` starts it and
    returns its exit code."""
    log = Path(RunFiles(dir=str(run_dir)).snakemake_log)
    # What this call creates to hold the log: a run refused before any job (the Snakefile's memory check) goes
    # again, so a refused config still writes nothing under results/.
    created = [folder for folder in (log.parent.parent.parent, log.parent.parent, log.parent) if not folder.exists()]
    print(f"{voice.command} {run_dir.name}: Snakemake's log is {log}", flush=True)
    terminal = os.dup(_screen().fileno()) if voice.view and not verbose else None
    if terminal is not None:
        command += ["--logger", "spica", "--logger-spica-run-dir", str(run_dir), "--logger-spica-fd", str(terminal)]
    stop = threading.Event()
    with appended_log(log, f"{voice.command} {run_dir.name}") as (written, start):
        says = None if verbose else voice.says
        follows = verbose or says is not None
        follower = threading.Thread(target=_follow, args=(log, stop, start, says), daemon=True) if follows else None
        if follower is not None:
            follower.start()
        try:
            code = run_child(command, cwd, written, (terminal,) if terminal is not None else ())
        finally:
            if terminal is not None:
                os.close(terminal)
            stop.set()
            if follower is not None:
                follower.join()
    sys.stdout.flush()
    if code != 0:
        print(failure_text(log, code, start, voice.command), file=sys.stderr)
        if created and [p for p in created[0].rglob("*") if p.is_file()] == [log]:  # refused before any job ran
            shutil.rmtree(created[0])
            print("(nothing was run: the log and its folders are removed)", file=sys.stderr)
        return code
    answer = voice.answer(run_dir)
    if answer:
        print(f"\n{answer}")
    return code


def _screen():
    """The stream the view is drawn on: this process's stdout, or the real one when a caller captured it in Python
    (a descriptor is what the plugin in Snakemake's process is handed)."""
    try:
        sys.stdout.fileno()
        return sys.stdout
    except (AttributeError, io.UnsupportedOperation):
        return sys.__stdout__


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def failure_text(log: Path, code: int, start: int = 0, command: str = "spica run") -> str:
    """A failed Snakemake: the last lines this invocation wrote to its log (from byte `start`), and where the
    whole log is."""
    text = log.read_bytes()[start:].decode("utf-8", errors="replace") if log.is_file() else ""
    lines = text.rstrip().splitlines()
    tail = "\n".join(f"  {line}" for line in lines[-FAILURE_LINES:])
    return f"\n{command} failed (Snakemake exit {code}); the last lines of its log:\n{tail}\nthe whole log: {log}"


def _follow(log: Path, stop: threading.Event, start: int, says: Callable[[str], str | None] | None) -> None:
    """Copy what this invocation adds to the log (from byte `start`) onto the screen as it grows, every line
    (`--verbose`) or what `says` makes of each (none when it gives None), until the run ends and the rest is copied."""
    started = datetime.now(timezone.utc)
    pending = ""  # a line not yet ended when last read
    with open(log, encoding="utf-8", errors="replace") as reading:
        reading.seek(start)
        while True:
            ended = stop.wait(FOLLOW_SECONDS)
            chunk = reading.read()
            if chunk and says is None:
                sys.stdout.write(chunk)
            elif chunk:
                *lines, pending = (pending + chunk).split("\n")
                seconds = (datetime.now(timezone.utc) - started).total_seconds()
                for shown in filter(None, map(says, lines)):
                    sys.stdout.write(f"[{seconds:4.0f} s] {shown}\n")
            sys.stdout.flush()
            if ended:
                return
