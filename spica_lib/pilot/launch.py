"""Start and stop the sweep's pilot keeper from the Snakefile (`onstart`, `onsuccess`, `onerror`)."""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import sys
from pathlib import Path

from spica_lib.base.lifetime import SWEEP_OWNER_VARIABLE, end_child
from spica_lib.pilot.settings import SPOOL_VARIABLE, PilotSettings
from spica_lib.pilot.spool import Spool
from spica_lib.run.layout import RunFiles

_keeper: subprocess.Popen | None = None


def start_keeper(run_dir: str | Path, settings: PilotSettings) -> None:
    """Make this sweep's spool, start its keeper, and point the rule scripts (local jobs) at it."""
    global _keeper
    if _keeper is not None or not settings.on:
        return
    files = RunFiles(dir=str(run_dir))
    spools = Path(files.pilot_spools)
    shutil.rmtree(spools, ignore_errors=True)  # a killed sweep's (Snakemake's lock: no other sweep works here)
    spool = Spool(spools / f"{os.getpid()}-{secrets.token_hex(4)}").create()
    os.environ[SPOOL_VARIABLE] = str(spool.root.resolve())
    command = [
        sys.executable, "-m", "spica_lib.pilot.keeper", str(os.getpid()), str(spool.root.resolve()),
        "--settings", settings.model_dump_json(), "--log-dir", str(Path(files.pilot_logs).resolve()),
    ]  # fmt: skip
    if os.environ.get(SWEEP_OWNER_VARIABLE, "").isdigit():  # started by `spica run`: the keeper watches it too
        command += ["--sweep-owner", os.environ[SWEEP_OWNER_VARIABLE]]
    _keeper = subprocess.Popen(command, stdin=subprocess.DEVNULL, start_new_session=True)


def stop_keeper() -> None:
    """End the pilots (the keeper scancels them and removes the spool) and wait for it."""
    global _keeper
    if _keeper is None:
        return
    os.environ.pop(SPOOL_VARIABLE, None)
    end_child(_keeper, grace_seconds=60)
    _keeper = None
