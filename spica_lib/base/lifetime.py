"""No process outlives its owner: a child asks the kernel to signal it when its parent dies.

`PR_SET_PDEATHSIG` covers every death of the parent, SIGKILL included. The request only covers a
parent still alive when it is made, so the parent is checked again afterwards: one that died in
between has already left the child to init, and the child exits at once. The kernel ties the
request to the thread that forked the child: fork from a thread that lives as long as the parent.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import subprocess

PR_SET_PDEATHSIG = 1
# The pid of `spica run`, in its Snakemake's environment: Snakemake's own helpers end the sweep once it is gone
# (the kernel's SIGTERM only asks Snakemake to finish the jobs it runs, and those may wait on SLURM for ever).
SWEEP_OWNER_VARIABLE = "SPICA_SWEEP_OWNER"


def die_with_parent(parent: int, signum: int) -> None:
    """In a freshly forked child of `parent`: be sent `signum` when it dies; exit now if it already has."""
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signum)
    if os.getppid() != parent:
        os._exit(1)


def signal_group(pid: int, signum: int) -> None:
    """Signal the process group led by `pid` (a job and its replays), if it is still there."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signum)


def end_child(process: subprocess.Popen, grace_seconds: float) -> None:
    """SIGTERM a child process (it cleans up on it), SIGKILL it if it is still there after `grace_seconds`."""
    process.terminate()
    try:
        process.wait(timeout=grace_seconds)
    except subprocess.TimeoutExpired:
        process.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=30)


ORPHAN_POLL_SECONDS = 0.1


def silence_when_orphaned() -> None:
    """From now on, once this process's parent has died, send its stdout and stderr to /dev/null.

    For a Snakemake that `spica run` / `spica fleet` started: when its owner dies, whoever read its output
    (a terminal, a pipe) may be gone too, and Snakemake then stops its jobs and writes as it does so. A write
    to a pipe with no reader fails (EPIPE); in Snakemake's job-end path that failure left its scheduler
    waiting for ever for a job that had ended (a fleet's Snakemake lingered minutes after `kill -9 spica
    fleet`, tests/test_fleet_workflow.py). Nobody reads that output any more, so writing it nowhere loses
    nothing. A daemon thread watches the parent (it is re-parented once the parent dies).
    """
    import threading
    import time

    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(ORPHAN_POLL_SECONDS)
        nowhere = os.open(os.devnull, os.O_WRONLY)
        for descriptor in (1, 2):
            os.dup2(nowhere, descriptor)
        os.close(nowhere)

    threading.Thread(target=watch, name="spica-orphan-watch", daemon=True).start()
