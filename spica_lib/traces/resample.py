"""Fresh traffic from a trace: a block bootstrap, another day like the one recorded.

A trace is one day (or hour) of traffic; the finish needs others like it. A resample cuts the
trace's time span into `blocks` equal windows, draws that many windows with replacement and lays
them end to end, each window's arrivals kept at their offsets inside it. So a resample keeps the
trace's length and, on average, its request count and rate, while its bursts (which live inside a
window) and its mix of heavy and light minutes change from one resample to the next.

Each copy of a window is fresh traffic: no copy hits a cache that only another copy of the same window
wrote, which on another day nobody would have written. A KV block id (`hash_ids`) in the second or later
copy of a window keeps its name only when a different window that uses it was laid earlier in the resample
(a system prompt, a popular document: its blocks would be cached on any day); every other id of that copy
is renamed into the copy's own id space. (Format 1 kept every id used in more than one window of the
trace, so when those other windows were not drawn, or came later, a repeated copy hit blocks only its
earlier copy had written: measured in docs/benchmarks/finish.md, "Fresh traffic from a trace".) The first copy
of each window keeps the trace's ids, so sharing between windows stays as recorded.

The block length: `blocks_for` gives TARGET_BLOCKS windows, each at least MIN_BLOCK_MS long (fewer,
longer windows on a short trace; at least 2). Ten windows give C(19, 10) = 92,378 distinct
resamples; a window of at least a minute holds the minute-scale bursts and the seconds-to-minutes
gaps between a conversation's turns (docs/benchmarks/finish.md, "Fresh traffic from a trace", measures how
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
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import numpy as np

from spica_lib.base.artifacts import atomic_write_text
from spica_lib.traces.scan import DEFAULT_SPLIT_ROOT, SPLIT_ROOT_ENV, scan_trace

RESAMPLES_ENV = "SPICA_TRACE_RESAMPLES"  # where a sweep keeps its resamples (set by the workflow)
RESAMPLE_FORMAT = 2  # bumped when the rule changes, so an older resample is never reused (2: fresh copies)
TARGET_BLOCKS = 10
MIN_BLOCK_MS = 60_000.0


def blocks_for(duration_ms: float) -> int:
    """How many windows a trace of this span is cut into (see the module docstring)."""
    return int(max(2, min(TARGET_BLOCKS, duration_ms // MIN_BLOCK_MS)))


def resample_trace(path: str | Path, index: int) -> str:
    """The path of fresh sample `index` of the trace at `path` (written on first use)."""
    blocks = blocks_for(scan_trace(path).duration_ms)
    label = f"resample{index}-b{blocks}-v{RESAMPLE_FORMAT}"
    return derived_trace(path, label, lambda records, rng: resampled_records(records, blocks, rng), seed=index)


def derived_trace(path: str | Path, label: str, derive: Callable[[list[dict], np.random.Generator], list[dict]],
                  seed: int) -> str:  # fmt: skip
    """The path of a trace drawn from the one at `path` (a resample, the search's sample), named by the source's
    content and `label`: written once, atomically, with a generator seeded by the source's hash and `seed`."""
    scan = scan_trace(path)
    root = Path(os.environ.get(RESAMPLES_ENV) or os.environ.get(SPLIT_ROOT_ENV, DEFAULT_SPLIT_ROOT)).resolve()
    target = root / f"{scan.sha256[:24]}-{label}" / "trace.jsonl"
    if target.is_file():
        return str(target)
    # scan_trace has parsed every line: these are Mooncake records.
    records = [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip()]
    lines = derive(records, np.random.default_rng([int(scan.sha256[:15], 16), seed]))
    target.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(target, "".join(json.dumps(r, separators=(",", ":")) + "\n" for r in lines))
    return str(target)


class Placed(NamedTuple):
    """Where a trace record lands in a resample: its record, the window it comes from, which copy of that
    window (0: the first), its slot and its new arrival time (ms)."""

    position: int
    window: int
    copy: int
    slot: int
    stamp: float


def resample_plan(records: list[dict], blocks: int, rng: np.random.Generator) -> list[Placed]:
    """Which record lands where in one block-bootstrap resample, in arrival order."""
    stamps = np.array([float(r["timestamp"]) for r in records])
    first, span = float(stamps.min()), float(stamps.max() - stamps.min())
    width = span / blocks if span > 0 else 1.0
    # The last arrival belongs to the last window (not to a window of its own past the end).
    window = np.minimum(((stamps - first) // width).astype(int), blocks - 1)
    members: dict[int, list[int]] = {w: [] for w in range(blocks)}
    for position, w in enumerate(window):
        members[int(w)].append(position)
    drawn = rng.integers(0, blocks, size=blocks)
    copies: Counter[int] = Counter()
    out: list[Placed] = []
    for slot, w in enumerate(int(w) for w in drawn):
        copy = copies[w]
        copies[w] += 1
        start = first + w * width
        out += [Placed(p, w, copy, slot, slot * width + float(stamps[p]) - start) for p in members[w]]
    out.sort(key=lambda item: (item.stamp, item.slot, item.position))
    return out


def resampled_records(records: list[dict], blocks: int, rng: np.random.Generator) -> list[dict]:
    """One block-bootstrap resample of Mooncake records (dicts with timestamp, hash_ids, ...), by arrival time."""
    plan = resample_plan(records, blocks, rng)
    windows_of_id: dict[int, set[int]] = {}
    for placed in plan:
        if placed.copy == 0:
            for block_id in records[placed.position].get("hash_ids") or []:
                windows_of_id.setdefault(block_id, set()).add(placed.window)
    # A copy's own ids are shifted past every id the trace uses, by a multiple of the copy number.
    stride = max((h for r in records for h in r.get("hash_ids") or []), default=0) + 1
    laid_before = {slot: {p.window for p in plan if p.slot < slot} for slot in {p.slot for p in plan}}
    out = []
    for placed in plan:
        record = dict(records[placed.position])
        record["timestamp"] = int(round(placed.stamp))
        if placed.copy:
            earlier = laid_before[placed.slot] - {placed.window}
            record["hash_ids"] = [
                h if windows_of_id.get(h, set()) & earlier else h + placed.copy * stride
                for h in record.get("hash_ids") or []
            ]
        out.append(record)
    return out
