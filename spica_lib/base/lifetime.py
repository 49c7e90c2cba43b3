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
