"""What `spica run` puts on the screen: the progress view while Snakemake runs, the run's answer at the end.

Snakemake, its jobs and the warm host write to the run's `logs/snakemake.log`, never to the screen: their file
descriptors 1 and 2 are that file, so a job's print reaches it as surely as Snakemake's own records (under
SLURM a job's output stays in its SLURM log either way). The screen gets the progress view, which Snakemake's
logger plugin `spica` draws on a descriptor handed to it (snakemake_logger_plugin_spica), and then, from this
process, the answer (run/answer.py) or, when Snakemake failed, the log's last lines and its path. With
`verbose`, the log itself is followed onto the screen instead of the view.
"""

from __future__ import annotations

import io
import os
import shutil
import sys
import threading
from datetime import datetime, timezone
from pathlib import Path

from spica_lib.run.answer import answer_block
from spica_lib.run.layout import RunFiles

FAILURE_LINES = 15  # the last lines of Snakemake's log shown when it failed
FOLLOW_SECONDS = 0.2  # how often `--verbose` looks for new lines in the log


def run_on_screen(command: list[str], run_dir: Path, verbose: bool, run_child, cwd: str | Path | None = None) -> int:
    """Run Snakemake's `command` (`python -m snakemake ...`) for the sweep in `run_dir`; show its progress, then
    its answer. `run_child(command, cwd, stdout, pass_fds)` starts it and returns its exit code."""
    log = Path(RunFiles(dir=str(run_dir)).snakemake_log)
    # What this call creates to hold the log: a run refused before any job (the Snakefile's memory check) goes
    # again, so a refused config still writes nothing under results/.
    created = [folder for folder in (log.parent.parent.parent, log.parent.parent, log.parent) if not folder.exists()]
    log.parent.mkdir(parents=True, exist_ok=True)
    print(f"spica run {run_dir.name}: Snakemake's log is {log}", flush=True)
    terminal = None if verbose else os.dup(_screen().fileno())
    if terminal is not None:
        command = [*command[:1], "-m", "spica_lib.run.snakemake_main", *command[3:]]  # with the plugin registered
        command += ["--logger", "spica", "--logger-spica-run-dir", str(run_dir), "--logger-spica-fd", str(terminal)]
    stop = threading.Event()
    # Appended, each invocation under a dated header: running a finished sweep again (which finds nothing to do)
    # must not erase the log of the run that did the work.
    start = log.stat().st_size if log.is_file() else 0
    with open(log, "a", encoding="utf-8") as written:
        gap = "\n" if start else ""  # a blank line between one invocation's log and the next
        written.write(f"{gap}=== spica run {run_dir.name}, started {_now()} ===\n")
        written.flush()
        follower = threading.Thread(target=_follow, args=(log, stop, start), daemon=True) if verbose else None
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
        print(failure_text(log, code, start), file=sys.stderr)
        if created and [p for p in created[0].rglob("*") if p.is_file()] == [log]:  # refused before any job ran
            shutil.rmtree(created[0])
            print("(nothing was run: the log and its folders are removed)", file=sys.stderr)
        return code
    answer = answer_block(run_dir)
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


def failure_text(log: Path, code: int, start: int = 0) -> str:
    """A failed Snakemake: the last lines this invocation wrote to its log (from byte `start`), and where the
    whole log is."""
    text = log.read_bytes()[start:].decode("utf-8", errors="replace") if log.is_file() else ""
    lines = text.rstrip().splitlines()
    tail = "\n".join(f"  {line}" for line in lines[-FAILURE_LINES:])
    return f"\nspica run failed (Snakemake exit {code}); the last lines of its log:\n{tail}\nthe whole log: {log}"


def _follow(log: Path, stop: threading.Event, start: int) -> None:
    """`--verbose`: copy what this invocation adds to the log (from byte `start`) onto the screen as it grows,
    until the run ends and the rest is copied."""
    with open(log, encoding="utf-8", errors="replace") as reading:
        reading.seek(start)
        while True:
            ended = stop.wait(FOLLOW_SECONDS)
            chunk = reading.read()
            if chunk:
                sys.stdout.write(chunk)
                sys.stdout.flush()
            if ended:
                return
