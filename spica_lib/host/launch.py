"""Start and stop the sweep's warm host from the Snakefile (`onstart`, `onsuccess`, `onerror`)."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys

from spica_lib.base.lifetime import end_child
from spica_lib.host.client import ADDRESS_VARIABLE, OFF

_host: subprocess.Popen | None = None


def start_host() -> None:
    """Start the warm host as a child of this (Snakemake's main) process, and point its jobs at it.

    Jobs inherit the address through the environment. `SPICA_WARM_HOST=off` keeps every job in its
    own process.
    """
    global _host
    if os.environ.get(ADDRESS_VARIABLE) == OFF or _host is not None:
        return
    address = f"spica-host-{os.getpid()}-{secrets.token_hex(8)}@{os.environ.get('SLURM_JOB_ID', '')}"
    os.environ[ADDRESS_VARIABLE] = address  # the host's name reaches it here, not on its (public) command line
    command = [sys.executable, "-m", "spica_lib.host.server", str(os.getpid())]
    _host = subprocess.Popen(command, stdin=subprocess.DEVNULL)


def stop_host() -> None:
    """Stop the warm host (it kills any job child still running) and wait for it."""
    global _host
    if _host is None:
        return
    os.environ.pop(ADDRESS_VARIABLE, None)
    end_child(_host, grace_seconds=30)
    _host = None
