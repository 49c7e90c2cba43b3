"""Mooncake JSONL traces: one request per line, `{timestamp, input_length, output_length, hash_ids}`.

`timestamp` is the arrival time in milliseconds; `hash_ids` names the prompt's KV blocks (512
tokens each by default) so the replay can model prefix reuse.
"""

from __future__ import annotations

import functools
import hashlib
import json
from pathlib import Path
from typing import NamedTuple

from pydantic import BaseModel, ConfigDict, Field, StrictFloat, StrictInt, ValidationError


class TraceFormatError(ValueError):
    """A trace line that is not a Mooncake record."""


class MooncakeRecord(BaseModel):
    """One request of a Mooncake trace. Extra keys (e.g. a session id) are tolerated."""

    model_config = ConfigDict(extra="allow")

    timestamp: StrictInt | StrictFloat = Field(ge=0)
    input_length: StrictInt = Field(ge=1)
    output_length: StrictInt = Field(ge=0)
    hash_ids: list[StrictInt] = Field(default_factory=list)


class TraceScan(NamedTuple):
    sha256: str
    records: int
    duration_ms: float  # last arrival minus first (the trace's span before any speed-up)
    input_tokens: int = 0  # summed over the records (their means size the static estimate's traffic)
    output_tokens: int = 0


def scan_trace(path: str | Path) -> TraceScan:
    """Parse every line of a Mooncake trace and hash the file, in one pass; once per file and process.

    A bad line anywhere is reported with its number before any compute (not as a load-predictor
    crash or a sweep of failed trials), and the hash that names the run and every trial key is
    computed once, not once per suggestion.
    """
    resolved = Path(path).resolve()
    stat = resolved.stat()
    return _scan(str(resolved), stat.st_size, stat.st_mtime_ns)


@functools.cache
def _scan(path: str, size: int, mtime_ns: int) -> TraceScan:  # size and mtime: a changed file is scanned again
    digest = hashlib.sha256()
    records = 0
    first, last = float("inf"), float("-inf")
    inputs = outputs = 0
    with open(path, "rb") as handle:
        for number, raw in enumerate(handle, start=1):
            digest.update(raw)
            line = raw.decode("utf-8", errors="replace")
            if line.strip():
                record = parse_record(line, number)
                stamp = float(record.timestamp)
                first, last = min(first, stamp), max(last, stamp)
                inputs, outputs = inputs + record.input_length, outputs + record.output_length
                records += 1
    if records == 0:
        raise TraceFormatError("the file holds no records")
    return TraceScan(
        sha256=digest.hexdigest(), records=records, duration_ms=last - first, input_tokens=inputs, output_tokens=outputs
    )


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
