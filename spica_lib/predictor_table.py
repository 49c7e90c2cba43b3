"""`load_predictor.parquet`: one row per (interval, candidate) with its loss and whether it won.

Columns: interval, preset, family, log1p, loss (inf when no window could be scored), windows,
windows_scored, warmup, winner, seconds. Empty (with these columns) when nothing was scored.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

COLUMNS = ["interval", "preset", "family", "log1p", "loss", "windows", "windows_scored", "warmup", "winner", "seconds"]


def write_predictor_table(path: str | Path, rows: list[dict[str, Any]]) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.with_name(f".{path.name}.tmp")
    pd.DataFrame(rows, columns=COLUMNS).to_parquet(temp, index=False)
    temp.replace(path)
