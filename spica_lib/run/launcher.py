"""`spica run`: start (or resume) a sweep with Snakemake, clearing a stale lock first.

After a hard kill Snakemake leaves its working-directory lock behind and refuses to start until
someone runs `--unlock`. Unlocking is only safe when no other Snakemake is working in this
directory, so that is checked first: a live one means the lock is real and is left alone.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import psutil

from spica_lib.base.lifetime import SWEEP_OWNER_VARIABLE, die_with_parent

SNAKEFILE = Path(__file__).resolve().parents[2] / "workflow" / "Snakefile"


def other_snakemake_here(directory: Path) -> list[int]:
    """PIDs of other Snakemake processes whose working directory is `directory` and that may hold its lock.

    Snakemake inside a cluster job runs with --nolock; one still exiting after a scancel is no reason to refuse.
    """
    mine = {os.getpid(), os.getppid()}
    found = []
    for process in psutil.process_iter(["pid", "cmdline"]):
        try:
            cmdline = " ".join(process.info["cmdline"] or [])
            if (
                process.info["pid"] in mine
                or "snakemake" not in cmdline
                or "spica run" in cmdline
                or "--nolock" in cmdline
            ):
                continue
            if Path(process.cwd()).resolve() == directory:
                found.append(process.info["pid"])
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


def has_lock(directory: Path) -> bool:
    locks = directory / ".snakemake" / "locks"
    return locks.is_dir() and any(locks.iterdir())


HOST_AT_PARSE_VARIABLE = "SPICA_HOST_AT_PARSE"  # read (and removed) by the Snakefile of the sweep's main Snakemake
DRY_RUN_FLAGS = {"-n", "--dry-run", "--dryrun"}
# Snakemake's own command line, its SIGTERM handler freed of a deadlock and Spica's logger plugin registered.
SNAKEMAKE_MAIN = "spica_lib.run.snakemake_main"


def snakemake_command(
    config: str, cores: int | None, profile: str | None, run: str | None, extra: list[str], root: str | None = None
) -> list[str]:
    """The Snakemake command of one sweep; `root` puts its run folder there instead of results/ (a fleet's models)."""
    # --force-use-threads: the stages before round 0 run in Snakemake's own process (spica_lib/run/jobs/setup.py)
    command = [
        sys.executable, "-m", SNAKEMAKE_MAIN, "--snakefile", str(SNAKEFILE), "--rerun-incomplete", "--force-use-threads"
    ]  # fmt: skip
    if profile:
        command += ["--profile", profile]
    else:  # a replay job killed from outside (e.g. out of memory): its started trials are then recorded as failed
        command += ["--retries", "1"]
    if cores is not None:
        command += ["--cores", str(cores)]
    command += extra
    command += ["--config", f"spica={config}"] + ([f"run={run}"] if run else []) + ([f"root={root}"] if root else [])
    return command


def run_sweep(
    config: str,
    cores: int | None = 2,
    profile: str | None = None,
    run: str | None = None,
    extra: list[str] | None = None,
    verbose: bool = False,
) -> int:
    """Run the sweep; on the screen its progress, then its answer (run/run_screen.py). A dry run prints
    Snakemake's plan as Snakemake writes it."""
    command = snakemake_command(config, cores, profile, run, list(extra or []))
    problem = clear_stale_lock(Path.cwd().resolve(), command)
    if problem:
        print(problem, file=sys.stderr)
        return 1
    if DRY_RUN_FLAGS & set(extra or []):
        return run_forwarding_signals(command)
    from spica_lib.config import ConfigError
    from spica_lib.run.layout import prepare_run
    from spica_lib.run.run_screen import run_on_screen

    try:  # the run folder holds the log, so it is named first, as the Snakefile names it; a bad config is
        # refused here, before Snakemake starts and before anything is written under results/
        run_dir = Path(prepare_run(config, run).dir)
    except ConfigError as error:
        print(error, file=sys.stderr)
        return 2
    # A sweep that will run: its Snakemake may start the warm host while it parses the Snakefile, not after
    # (it cannot tell a dry run then), so the host's imports overlap Snakemake's own start.
    os.environ[HOST_AT_PARSE_VARIABLE] = "1"
    try:
        return run_on_screen(command, run_dir, verbose, run_forwarding_signals)
    finally:
        os.environ.pop(HOST_AT_PARSE_VARIABLE, None)


def clear_stale_lock(directory: Path, command: list[str]) -> str | None:
    """Remove the lock a killed Snakemake left in `directory`; None when the sweep may start, else why not."""
    with unlock_guard(directory) as guarded:
        if not guarded:
            return f"another spica run is checking the lock in {directory}; try again"
        if has_lock(directory):
            others = other_snakemake_here(directory)
            if others:
                return f"another Snakemake (pid {others}) is working in {directory}; not touching its lock"
            print("clearing the lock left by an interrupted run", file=sys.stderr)
            subprocess.run([*command, "--unlock"], check=True, capture_output=True, cwd=directory)
    return None


UNLOCK_WAIT_SECONDS = 30.0  # how long a second `spica run` waits for the first one's check and unlock


@contextlib.contextmanager
def unlock_guard(directory: Path, wait_seconds: float | None = None) -> Iterator[bool]:
    """An exclusive file lock around the stale-lock check and the unlock (True once held).

    Two `spica run` started together after a crash would otherwise both find the stale lock, and
    the second could remove the lock the first one's Snakemake had just taken.
    """
    path = directory / ".snakemake" / "spica-unlock.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        deadline = time.monotonic() + (UNLOCK_WAIT_SECONDS if wait_seconds is None else wait_seconds)
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    yield False
                    return
                time.sleep(0.1)
        try:
            yield True
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _stop_with_parent(parent: int) -> None:
    """In the Snakemake child, before it runs: ask for SIGTERM when `spica run` dies, even by SIGKILL.

    Snakemake then stops as if told to (its jobs, the warm host and their replays with it). A
    forwarded signal needs a living `spica run`; a SIGKILL (a test's timeout, the OOM killer) left
    Snakemake running on its own. The kernel ties the request to the forking thread, here the main
    thread, which lives as long as `spica run`.
    """
    die_with_parent(parent, signal.SIGTERM)
    # A `spica run` started in the background of a script has SIGINT ignored, and its Snakemake would inherit
    # that: the pilots' keeper ends a sweep whose `spica run` died with a SIGINT to Snakemake (spica_lib/pilot).
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def run_forwarding_signals(
    command: list[str], cwd: str | Path | None = None, output: IO[str] | None = None, pass_fds: tuple[int, ...] = ()
) -> int:
    """Run Snakemake and pass SIGTERM / SIGHUP on to it, so stopping `spica run` stops the sweep.

    Snakemake then stops its jobs, and each replay worker its children. (Ctrl-C reaches the whole
    foreground process group by itself.) With `output`, its stdout and stderr go there; `pass_fds` stay open in it.
    """
    env = {**os.environ, SWEEP_OWNER_VARIABLE: str(os.getpid())}
    child = subprocess.Popen(
        command, cwd=cwd, env=env, stdout=output, stderr=output, pass_fds=pass_fds,
        preexec_fn=functools.partial(_stop_with_parent, os.getpid()),
    )  # fmt: skip

    def forward(signum: int, frame: object) -> None:
        child.send_signal(signum)

    previous = {signum: signal.signal(signum, forward) for signum in (signal.SIGTERM, signal.SIGHUP)}
    try:
        while True:
            try:
                return child.wait()
            except KeyboardInterrupt:
                continue  # Snakemake got the same Ctrl-C: wait for it to stop its jobs
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
