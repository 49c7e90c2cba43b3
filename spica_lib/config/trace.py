"""Mooncake JSONL traces: one request per line, `{timestamp, input_length, output_length, hash_ids}`.

`timestamp` is the arrival time in milliseconds; `hash_ids` names the prompt's KV blocks (512
tokens each by default) so the replay can model prefix reuse.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, StrictFloat, StrictInt, ValidationError

HEAD_LINES = 20  # enough to catch a wrong file, cheap on a multi-GB trace


class TraceFormatError(ValueError):
    """A trace line that is not a Mooncake record."""


class MooncakeRecord(BaseModel):
    """One request of a Mooncake trace. Extra keys (e.g. a session id) are tolerated."""

    model_config = ConfigDict(extra="allow")

    timestamp: StrictInt | StrictFloat = Field(ge=0)
    input_length: StrictInt = Field(ge=1)
    output_length: StrictInt = Field(ge=0)
    hash_ids: list[StrictInt] = Field(default_factory=list)


def check_mooncake_head(path: Path, lines: int = HEAD_LINES) -> int:
    """Parse the first `lines` non-blank lines as Mooncake records; return how many were read."""
    seen = 0
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            parse_record(line, number)
            seen += 1
            if seen >= lines:
                break
    if seen == 0:
        raise TraceFormatError("the file holds no records")
    return seen


def parse_record(line: str, number: int) -> MooncakeRecord:
    try:
        data = json.loads(line)
    except json.JSONDecodeError as exc:
        raise TraceFormatError(f"line {number} is not JSON ({exc.msg})") from None
    if not isinstance(data, dict):
        raise TraceFormatError(f"line {number} is not a JSON object")
    try:
        return MooncakeRecord.model_validate(data)
    except ValidationError as exc:
        error = exc.errors(include_url=False)[0]
        field = ".".join(str(p) for p in error["loc"])
        raise TraceFormatError(f"line {number}: {field}: {error['msg']}") from None


def file_sha256(path: str | Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
