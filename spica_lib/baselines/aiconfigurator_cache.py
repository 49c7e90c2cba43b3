"""aiconfigurator's search answers, kept on disk by their inputs and versions.

Its search (`cli_default`) takes tens of seconds of CPU on the sweep's critical path and answers
the same inputs the same way: the model, the GPU budget, the system, the backend and its version,
ISL/OSL, the bounds, and the installed aiconfigurator and aiconfigurator-core. Each answer (the best
row per deployment mode) is a JSON file named by the SHA-256 of all of those, under
`$SPICA_AIC_CACHE` (default `~/.cache/spica/aiconfigurator`), written atomically; a file that
cannot be read is searched again.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

from spica_lib.base.artifacts import atomic_write_text, sha256_of

CACHE_VARIABLE = "SPICA_AIC_CACHE"
Rows = dict[str, dict[str, Any]]  # deployment mode -> aiconfigurator's best row


def cache_folder() -> Path:
    default = Path(os.path.expanduser("~")) / ".cache" / "spica" / "aiconfigurator"
    return Path(os.environ.get(CACHE_VARIABLE) or default)


def cached_search(inputs: dict[str, Any], search: Callable[[], Rows]) -> Rows:
    """`search()`'s answer for `inputs`, from the cache when it holds one; else searched and kept."""
    versions = {name: _version(name) for name in ("aiconfigurator", "aiconfigurator-core")}
    path = cache_folder() / f"{sha256_of({'inputs': inputs, 'versions': versions})}.json"
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        pass
    rows = {mode: _plain(row) for mode, row in search().items()}
    atomic_write_text(path, json.dumps(rows, allow_nan=False))
    return rows


def _plain(row: dict[str, Any]) -> dict[str, Any]:
    """The row's numbers and words (its per-op provenance and other nested fields are not kept)."""
    out: dict[str, Any] = {}
    for key, value in row.items():
        if hasattr(value, "item"):  # numpy scalars
            value = value.item()
        if isinstance(value, bool | int | str) or (isinstance(value, float) and math.isfinite(value)):
            out[key] = value
    return out


def _version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None
