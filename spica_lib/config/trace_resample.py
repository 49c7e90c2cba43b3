"""Fresh traffic from a trace: a block bootstrap, another day like the one recorded.

A trace is one day (or hour) of traffic; the finish needs others like it. A resample cuts the
trace's time span into `blocks` equal windows, draws that many windows with replacement and lays
them end to end, each window's arrivals kept at their offsets inside it. So a resample keeps the
trace's length and, on average, its request count and rate, while its bursts (which live inside a
window) and its mix of heavy and light minutes change from one resample to the next.

Prefix reuse is kept where it is real. A KV block id (`hash_ids`) that the trace uses in one window
only (a conversation's own turns, a document read in one burst) is renamed in the second and later
copies of that window, so that two copies do not share a cache they would not share on another
day; an id used in several windows (a system prompt, a popular document) keeps its name, so that
sharing across the day stays as it was.

The block length: `blocks_for` gives TARGET_BLOCKS windows, each at least MIN_BLOCK_MS long (fewer,
longer windows on a short trace; at least 2). Ten windows give C(19, 10) = 92,378 distinct
resamples; a window of at least a minute holds the minute-scale bursts and the seconds-to-minutes
gaps between a conversation's turns (docs/benchmarks.md, "Fresh traffic from a trace", measures how
far a resample's request count, rate and lengths move).

A resample is written once per (trace content, sample index, blocks), atomically, in the run's
folder (`$SPICA_TRACE_RESAMPLES`, which the workflow sets to results/<run>/.trace-resamples for its
jobs) or, outside a sweep, under the held-out splits' root (SPICA_TRACE_SPLITS); any process (a
SLURM job included) rebuilds the same bytes from the same inputs.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path

import numpy as np

from spica_lib.base.artifacts import atomic_write_text
from spica_lib.config.trace import DEFAULT_SPLIT_ROOT, SPLIT_ROOT_ENV, scan_trace

RESAMPLES_ENV = "SPICA_TRACE_RESAMPLES"  # where a sweep keeps its resamples (set by the workflow)
RESAMPLE_FORMAT = 1  # bumped when the rule changes, so an older resample is never reused
TARGET_BLOCKS = 10
MIN_BLOCK_MS = 60_000.0


def blocks_for(duration_ms: float) -> int:
    """How many windows a trace of this span is cut into (see the module docstring)."""
    return int(max(2, min(TARGET_BLOCKS, duration_ms // MIN_BLOCK_MS)))


def resample_trace(path: str | Path, index: int) -> str:
    """The path of fresh sample `index` of the trace at `path` (written on first use)."""
    scan = scan_trace(path)
    blocks = blocks_for(scan.duration_ms)
    root = Path(os.environ.get(RESAMPLES_ENV) or os.environ.get(SPLIT_ROOT_ENV, DEFAULT_SPLIT_ROOT)).resolve()
    target = root / f"{scan.sha256[:24]}-resample{index}-b{blocks}-v{RESAMPLE_FORMAT}" / "trace.jsonl"
    if target.is_file():
        return str(target)
    # scan_trace has parsed every line: these are Mooncake records.
    records = [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip()]
    lines = resampled_records(records, blocks, np.random.default_rng([int(scan.sha256[:15], 16), index]))
    target.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(target, "".join(json.dumps(r, separators=(",", ":")) + "\n" for r in lines))
    return str(target)


def resampled_records(records: list[dict], blocks: int, rng: np.random.Generator) -> list[dict]:
    """One block-bootstrap resample of Mooncake records (dicts with timestamp, hash_ids, ...), by arrival time."""
    stamps = np.array([float(r["timestamp"]) for r in records])
    first, span = float(stamps.min()), float(stamps.max() - stamps.min())
    width = span / blocks if span > 0 else 1.0
    # The last arrival belongs to the last window (not to a window of its own past the end).
    window = np.minimum(((stamps - first) // width).astype(int), blocks - 1)
    windows_of_id: dict[int, set[int]] = {}
    for record, w in zip(records, window, strict=True):
        for block_id in record.get("hash_ids") or []:
            windows_of_id.setdefault(block_id, set()).add(int(w))
    local = {block_id for block_id, seen in windows_of_id.items() if len(seen) == 1}
    stride = max(windows_of_id, default=0) + 1  # renamed ids start above every id the trace uses
    members: dict[int, list[int]] = {w: [] for w in range(blocks)}
    for position, w in enumerate(window):
        members[int(w)].append(position)
    drawn = rng.integers(0, blocks, size=blocks)
    copies: Counter[int] = Counter()
    out: list[tuple[float, int, dict]] = []
    for slot, w in enumerate(drawn):
        copy = copies[int(w)]
        copies[int(w)] += 1
        start = first + int(w) * width
        for position in members[int(w)]:
            record = dict(records[position])
            offset = float(record["timestamp"]) - start
            stamp = slot * width + offset
            record["timestamp"] = int(round(stamp))
            if copy:
                record["hash_ids"] = [h + copy * stride if h in local else h for h in record.get("hash_ids") or []]
            out.append((stamp, len(out), record))
    out.sort(key=lambda item: (item[0], item[1]))
    return [record for _, _, record in out]
