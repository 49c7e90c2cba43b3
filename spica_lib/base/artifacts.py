"""Writing artifact files safely, and the canonical JSON form used for hashes.

Every artifact is written to a uniquely named temporary file in the same folder, flushed to disk,
then renamed over the target, so a reader (or a resumed run) sees either the old file or the
complete new one, never a torn one. A failed write leaves no temporary file behind. No pydantic
import at run time: the replay child writes its report with this too.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from pydantic import BaseModel

Model = TypeVar("Model", bound="BaseModel")
# `.<name>.<random>.tmp`: what a write killed half-way leaves (a resumed run clears them, run/sweep_process.py).
TEMPORARY_SUFFIX = ".tmp"


def canonical_json(data: Any) -> str:
    """Stable JSON text: sorted keys, no whitespace, no NaN/Infinity (those have no JSON form)."""
    return json.dumps(data, sort_keys=True, separators=(",", ":"), allow_nan=False, ensure_ascii=False)


def sha256_of(data: Any) -> str:
    return hashlib.sha256(canonical_json(data).encode("utf-8")).hexdigest()


@contextlib.contextmanager
def atomic_path(path: str | Path, private: bool = False) -> Iterator[Path]:
    """A fresh temporary path beside `path` to write to; on success it is synced and renamed over `path`.

    `private`: the file is 0600 from its creation on and a missing folder is an error, not made (a pilot
    spool's files: a folder removed under the writer must not come back with the umask's mode).
    """
    path = Path(path)
    if not private:
        path.parent.mkdir(parents=True, exist_ok=True)
    handle, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=TEMPORARY_SUFFIX)
    if not private:  # mkstemp makes 0600; an artifact is as readable as any file the user writes
        os.fchmod(handle, 0o666 & ~_umask())
    os.close(handle)
    try:
        yield Path(temp)
        descriptor = os.open(temp, os.O_RDONLY)
        try:
            os.fsync(descriptor)
        finally:
            os.close(descriptor)
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise


def _umask() -> int:
    """The process's umask, read without changing it (os.umask would set it, racing other threads)."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except OSError:
        pass
    return 0o022


def atomic_write_text(path: str | Path, text: str, private: bool = False) -> None:
    with atomic_path(path, private=private) as temp:
        temp.write_text(text, encoding="utf-8")


def atomic_write_parquet(path: str | Path, frame: Any) -> None:
    """Write a pandas DataFrame as Parquet, atomically."""
    with atomic_path(path) as temp:
        frame.to_parquet(temp, index=False)


def write_model(path: str | Path, model: BaseModel) -> None:
    """Write a pydantic artifact as indented JSON, atomically."""
    atomic_write_text(path, model.model_dump_json(indent=2) + "\n")


def read_model(path: str | Path, model_type: type[Model]) -> Model:
    return model_type.model_validate_json(Path(path).read_text(encoding="utf-8"))
