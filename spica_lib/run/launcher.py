"""`spica run`: start (or resume) a sweep with Snakemake, clearing a stale lock first.

After a hard kill Snakemake leaves its working-directory lock behind and refuses to start until
someone runs `--unlock`. Unlocking is only safe when no other Snakemake is working in this
directory, so that is checked first: a live one means the lock is real and is left alone.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil

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


def snakemake_command(
    config: str, cores: int | None, profile: str | None, run: str | None, extra: list[str]
) -> list[str]:
    command = [sys.executable, "-m", "snakemake", "--snakefile", str(SNAKEFILE), "--rerun-incomplete"]
    if profile:
        command += ["--profile", profile]
    else:  # a trial job killed from outside (e.g. out of memory) is then recorded as failed, not a stopped round
        command += ["--retries", "1"]
    if cores is not None:
        command += ["--cores", str(cores)]
    command += extra
    command += ["--config", f"spica={config}"] + ([f"run={run}"] if run else [])
    return command


def run_sweep(
    config: str,
    cores: int | None = 2,
    profile: str | None = None,
    run: str | None = None,
    extra: list[str] | None = None,
) -> int:
    directory = Path.cwd().resolve()
    command = snakemake_command(config, cores, profile, run, list(extra or []))
    if has_lock(directory):
        others = other_snakemake_here(directory)
        if others:
            print(f"another Snakemake (pid {others}) is working in {directory}; not touching its lock", file=sys.stderr)
            return 1
        print("clearing the lock left by an interrupted run", file=sys.stderr)
        subprocess.run([*command, "--unlock"], check=True, capture_output=True)
    return run_forwarding_signals(command)


def run_forwarding_signals(command: list[str]) -> int:
    """Run Snakemake and pass SIGTERM / SIGHUP on to it, so stopping `spica run` stops the sweep.

    Snakemake then stops its jobs, and each replay worker its children. (Ctrl-C reaches the whole
    foreground process group by itself.)
    """
    child = subprocess.Popen(command)

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
