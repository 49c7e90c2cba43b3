"""`load_predictor.parquet`: one row per (interval, candidate) with its loss and whether it won.

Columns: interval, preset, family, log1p, loss (inf when no window could be scored), windows,
windows_scored, warmup, winner, seconds. Empty (with these columns) when nothing was scored.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from spica_lib.base.artifacts import atomic_write_parquet

COLUMNS = ["interval", "preset", "family", "log1p", "loss", "windows", "windows_scored", "warmup", "winner", "seconds"]


def write_predictor_table(path: str | Path, rows: list[dict[str, Any]]) -> None:
    atomic_write_parquet(path, pd.DataFrame(rows, columns=COLUMNS))
