"""Mooncake JSONL traces: one request per line, `{timestamp, input_length, output_length, hash_ids}`.

`timestamp` is the arrival time in milliseconds; `hash_ids` names the prompt's KV blocks (512
tokens each by default) so the replay can model prefix reuse.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from pathlib import Path
from typing import NamedTuple

from pydantic import BaseModel, ConfigDict, Field, StrictFloat, StrictInt, ValidationError

from spica_lib.base.artifacts import atomic_write_text


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
    first_ms: float = 0.0  # the first arrival's timestamp
    input_tokens: int = 0  # summed over the records (their means size the static estimate's traffic)
    output_tokens: int = 0


# Derived traces (a held-out split) live next to the runs, on the file system every job of a sweep sees
# (a SLURM job included); keyed by the trace's content and the split, so any process can rebuild them.
SPLIT_ROOT_ENV = "SPICA_TRACE_SPLITS"
DEFAULT_SPLIT_ROOT = "results/.trace-splits"
# Kept scans live in the run's folder (the workflow sets this for every job): none outside a sweep.
SCANS_ENV = "SPICA_TRACE_SCANS"


def scan_trace(path: str | Path) -> TraceScan:
    """Parse every line of a Mooncake trace and hash the file, in one pass; once per file and process,
    and once per run where the run kept its scan (`keep_scan`).

    A bad line anywhere is reported with its number before any compute (not as a load-predictor
    crash or a sweep of failed trials), and the hash that names the run and every trial key is
    computed once, not once per suggestion.
    """
    resolved = Path(path).resolve()
    stat = resolved.stat()
    return _scan(str(resolved), stat.st_size, stat.st_mtime_ns)


class KeptScan(BaseModel):
    """Artifact `results/<run>/.trace-scans/<key>.json`: a trace's scan, for the run's other processes (a
    SLURM job included) to read instead of parsing and hashing the trace again. Keyed by the trace's
    path, size and modification time: a changed file is scanned afresh."""

    model_config = ConfigDict(extra="forbid")

    format: int
    path: str
    size: int
    mtime_ns: int
    sha256: str
    records: int
    duration_ms: float
    first_ms: float
    input_tokens: int
    output_tokens: int


SCAN_FORMAT = 1  # bumped when TraceScan changes, so an older kept scan is never read


def keep_scan(path: str | Path) -> Path | None:
    """Scan the trace (if this process has not) and write the scan where the run's jobs look for it
    (`$SPICA_TRACE_SCANS`; None and nothing written outside a sweep)."""
    resolved = Path(path).resolve()
    stat = resolved.stat()
    target = _kept_path(str(resolved), stat.st_size, stat.st_mtime_ns)
    if target is None:
        return None
    scan = _scan(str(resolved), stat.st_size, stat.st_mtime_ns)
    kept = KeptScan(format=SCAN_FORMAT, path=str(resolved), size=stat.st_size, mtime_ns=stat.st_mtime_ns,
                    **scan._asdict())  # fmt: skip
    target.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(target, kept.model_dump_json(indent=1))
    return target


def _kept_path(path: str, size: int, mtime_ns: int) -> Path | None:
    folder = os.environ.get(SCANS_ENV)
    if not folder:
        return None
    key = hashlib.sha256(f"{path}\0{size}\0{mtime_ns}\0{SCAN_FORMAT}".encode()).hexdigest()[:32]
    return Path(folder).resolve() / f"{key}.json"


@functools.cache
def _scan(path: str, size: int, mtime_ns: int) -> TraceScan:  # size and mtime: a changed file is scanned again
    kept = _kept_path(path, size, mtime_ns)
    if kept is not None and kept.is_file():
        try:
            scan = KeptScan.model_validate_json(kept.read_text(encoding="utf-8"))
        except (OSError, ValidationError):
            scan = None  # torn or foreign: scan the trace itself
        if scan is not None and (scan.path, scan.size, scan.mtime_ns) == (path, size, mtime_ns):
            return TraceScan(**scan.model_dump(exclude={"format", "path", "size", "mtime_ns"}))
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
        sha256=digest.hexdigest(),
        records=records,
        duration_ms=last - first,
        first_ms=first,
        input_tokens=inputs,
        output_tokens=outputs,
    )


def trace_output_lengths(path: str | Path) -> tuple[int, ...]:
    """Every record's output length, smallest first (once per file and process; the trace was checked by
    its scan, so this reads the one field it needs)."""
    resolved = Path(path).resolve()
    stat = resolved.stat()
    return _output_lengths(str(resolved), stat.st_size, stat.st_mtime_ns)


@functools.cache
def _output_lengths(path: str, size: int, mtime_ns: int) -> tuple[int, ...]:
    with open(path, encoding="utf-8") as handle:
        return tuple(sorted(int(json.loads(line)["output_length"]) for line in handle if line.strip()))


def trace_arrivals(path: str | Path) -> tuple[tuple[float, int], ...]:
    """Every record's (arrival after the trace's first, in ms of the trace's clock; output length), in file
    order (once per file and process). The replay starts its clock at the first arrival."""
    resolved = Path(path).resolve()
    stat = resolved.stat()
    return _arrivals(str(resolved), stat.st_size, stat.st_mtime_ns)


@functools.cache
def _arrivals(path: str, size: int, mtime_ns: int) -> tuple[tuple[float, int], ...]:
    with open(path, encoding="utf-8") as handle:
        records = [json.loads(line) for line in handle if line.strip()]
    first = min(float(r["timestamp"]) for r in records)
    return tuple((float(r["timestamp"]) - first, int(r["output_length"])) for r in records)


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


SPLIT_FORMAT = 1  # bumped when the split's rule changes, so an older split is never reused
MIN_PART_RECORDS = 10


class TraceSplit(NamedTuple):
    search: str  # the records before the cut, as they were
    holdout: str  # the records from the cut on, their arrival times shifted to start at the first of them


def split_trace(path: str | Path, holdout_fraction: float) -> TraceSplit:
    """Cut a trace by time: the last `holdout_fraction` of its span is held out from the search.

    Written once per (content, fraction) under SPICA_TRACE_SPLITS (default results/.trace-splits),
    each file atomically, and read back as it is afterwards. Raises TraceFormatError when a part
    would hold fewer than MIN_PART_RECORDS requests.
    """
    scan = scan_trace(path)
    check_split(path, holdout_fraction)
    root = Path(os.environ.get(SPLIT_ROOT_ENV, DEFAULT_SPLIT_ROOT)).resolve()
    folder = root / f"{scan.sha256[:24]}-holdout{holdout_fraction:g}-v{SPLIT_FORMAT}"
    split = TraceSplit(search=str(folder / "search.jsonl"), holdout=str(folder / "holdout.jsonl"))
    if Path(split.search).is_file() and Path(split.holdout).is_file():
        return split
    records = [
        (float(parse_record(line, n).timestamp), line)
        for n, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), start=1)
        if line.strip()
    ]
    cut = _cut(path, holdout_fraction)
    search = [line for stamp, line in records if stamp < cut]
    held = [(stamp, line) for stamp, line in records if stamp >= cut]
    start = min(stamp for stamp, _ in held)
    shifted = [_shifted(line, stamp - start) for stamp, line in held]
    folder.mkdir(parents=True, exist_ok=True)
    # Atomic: another process may be writing the same split; either copy is the same bytes.
    atomic_write_text(split.search, "\n".join(search) + "\n")
    atomic_write_text(split.holdout, "\n".join(shifted) + "\n")
    return split


def check_split(path: str | Path, holdout_fraction: float) -> tuple[int, int]:
    """Requests before and after the cut (nothing is written); TraceFormatError when a part is too small."""
    counts = _split_counts(str(Path(path).resolve()), scan_trace(path).sha256, holdout_fraction)
    if min(counts) < MIN_PART_RECORDS:
        raise TraceFormatError(
            f"a holdout of {holdout_fraction:g} of its span leaves {counts[0]} request(s) to search and "
            f"{counts[1]} to hold out; each part needs at least {MIN_PART_RECORDS}"
        )
    return counts


def _cut(path: str | Path, holdout_fraction: float) -> float:
    """The arrival time from which requests are held out."""
    scan = scan_trace(path)
    return scan.first_ms + (1 - holdout_fraction) * scan.duration_ms


@functools.cache
def _split_counts(path: str, sha256: str, holdout_fraction: float) -> tuple[int, int]:  # sha256: a changed file
    cut = _cut(path, holdout_fraction)
    with open(path, encoding="utf-8") as handle:
        stamps = [float(parse_record(line, n).timestamp) for n, line in enumerate(handle, start=1) if line.strip()]
    before = sum(stamp < cut for stamp in stamps)
    return before, len(stamps) - before


def _shifted(line: str, timestamp: float) -> str:
    data = json.loads(line)
    data["timestamp"] = int(timestamp) if float(timestamp).is_integer() else timestamp
    return json.dumps(data, separators=(",", ":"))
