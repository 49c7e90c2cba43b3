"""Writing artifact files safely, and the canonical JSON form used for hashes.

Every artifact is written to a temporary file in the same folder and then renamed over the target,
so a reader (or a resumed run) sees either the old file or the complete new one, never a torn one.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel

Model = TypeVar("Model", bound=BaseModel)


def canonical_json(data: Any) -> str:
    """Stable JSON text: sorted keys, no whitespace, no NaN/Infinity (those have no JSON form)."""
    return json.dumps(data, sort_keys=True, separators=(",", ":"), allow_nan=False, ensure_ascii=False)


def sha256_of(data: Any) -> str:
    return hashlib.sha256(canonical_json(data).encode("utf-8")).hexdigest()


def atomic_write_text(path: str | Path, text: str) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise


def atomic_write_parquet(path: str | Path, frame: Any) -> None:
    """Write a pandas DataFrame as Parquet, atomically (temporary file beside it, then rename)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.with_name(f".{path.name}.tmp")
    frame.to_parquet(temp, index=False)
    temp.replace(path)


def write_model(path: str | Path, model: BaseModel) -> None:
    """Write a pydantic artifact as indented JSON, atomically."""
    atomic_write_text(path, model.model_dump_json(indent=2) + "\n")


def read_model(path: str | Path, model_type: type[Model]) -> Model:
    return model_type.model_validate_json(Path(path).read_text(encoding="utf-8"))
