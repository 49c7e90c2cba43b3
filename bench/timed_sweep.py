"""One sweep from scratch in a scratch folder, timed: shared by the benchmarks that run `spica run`."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import yaml

T = TypeVar("T")


def timed_sweep(
    data: dict,
    cores: int,
    read: Callable[[Path], T],
    env: dict[str, str] | None = None,
    allowed: tuple[int, ...] = (0,),
    executor: list[str] | None = None,
) -> tuple[float, T]:
    """(wall seconds of `spica run` on config `data`, what `read` takes from its run folder before it is removed).

    `executor` replaces `--cores N` (e.g. `--profile profiles/slurm -- ...`)."""
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        path = folder / "spica.yaml"
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        started = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-m", "spica_lib.cli", "run", str(path), *(executor or ["--cores", str(cores)])],
            cwd=folder, capture_output=True, text=True, check=False, env={**os.environ, **(env or {})},
        )  # fmt: skip
        wall = time.perf_counter() - started
        if done.returncode not in allowed:
            raise SystemExit(done.stderr[-3000:])
        return wall, read(next((folder / "results").iterdir()))
