"""The search's sample of a long trace: a stratified, time-ordered part of it, so the search can order candidates
at the cost of a short trace while the finish decides on the whole (`sweep.search_sample`).

The sample keeps the trace's shape over time. The trace's span is cut into `STRATA` equal windows; from each, one
contiguous stretch of the same share of the window's span (the sample's share of the trace's requests) is kept,
starting at a seeded offset inside the window, and the stretches are laid end to end in the windows' order. Each
stretch keeps its arrivals at their offsets, so the rate inside it is the trace's rate there: a day's quiet night
and busy afternoon both appear, each at its own rate, where a block bootstrap (traces/resample.py) would
draw 2.4-hour windows at random and lose the diurnal shape. Nothing is drawn twice, so no stretch repeats another's
KV block ids. A stretch's first requests find a cache that the trace's earlier requests would have warmed empty:
the sample is slightly pessimistic on prefix reuse.

**The size rule** (`sample_size`): enough requests for the SLA's statistic, for the load's variation, and for
the traffic's own time structure. A percentile SLA needs `TAIL_REQUESTS` requests beyond its percentile per
replay (2,000 for p99); each of the `STRATA` windows needs at least `PER_STRATUM` requests for its own rate to be
measured (2,000 in all); and each stretch must last at least `MIN_STRETCH_MS` (two minutes), or it cuts the
conversations whose turns come seconds to minutes apart, and with them the prefix reuse between turns that the
KV router is judged on: on the 12k-request conversation trace, 30-second stretches (2,000 requests) kept the
whole-trace search's recommendation in 4 of 10 seeds, 90-second ones (6,000) in 5 of 5
(docs/benchmarks/search-sample.md). The sample is the largest of the three, and the trace is sampled only when
it holds at least `MIN_RATIO` times that (a smaller trace is searched whole: `auto` changes nothing there).

A sample is written once per (trace content, size, seed), atomically, beside the run's resamples; its seed is
the sweep's, offset by `SAMPLE_SEED_BASE` so that no sample index of the finish (resamples 0...) or of the
benches (1000...) ever draws the same stretches.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from spica_lib.traces.scan import scan_trace
from spica_lib.traces.resample import derived_trace

SAMPLE_FORMAT = 1
STRATA = 20
PER_STRATUM = 100
TAIL_REQUESTS = 20
MIN_STRETCH_MS = 120_000.0
MIN_RATIO = 2.0
SAMPLE_SEED_BASE = 10**9


def sample_size(total: int, percentile: float | None, span_ms: float) -> int | None:
    """The requests `auto` samples from a trace of `total` over `span_ms` (see the module docstring); None: search
    it whole."""
    need = STRATA * PER_STRATUM
    if span_ms > 0:
        need = max(need, math.ceil(total * STRATA * MIN_STRETCH_MS / span_ms))
    if percentile is not None:
        need = max(need, math.ceil(round(TAIL_REQUESTS / (1.0 - percentile / 100.0), 6)))
    return need if total >= MIN_RATIO * need else None


def sample_trace(path: str | Path, requests: int, seed: int) -> str:
    """The path of the search's sample of `requests` requests of the trace at `path` (written on first use)."""
    total = scan_trace(path).records
    if requests >= total:
        return str(path)
    return derived_trace(
        path, f"sample{requests}-s{seed}-v{SAMPLE_FORMAT}",
        lambda records, rng: sampled_records(records, requests / total, rng), seed=SAMPLE_SEED_BASE + seed,
    )  # fmt: skip


def sampled_records(records: list[dict], share: float, rng: np.random.Generator, strata: int = STRATA) -> list[dict]:
    """The stratified stretches (each `share` of its window) of Mooncake records, laid end to end, by arrival."""
    stamps = np.array([float(r["timestamp"]) for r in records])
    first, span = float(stamps.min()), float(stamps.max() - stamps.min())
    width = span / strata if span > 0 else 1.0
    keep = width * share
    out: list[tuple[float, int, dict]] = []
    for window in range(strata):
        start = first + window * width + float(rng.uniform(0.0, width - keep))
        inside = np.flatnonzero((stamps >= start) & (stamps < start + keep))
        for position in inside:
            record = dict(records[position])
            stamp = window * keep + (stamps[position] - start)
            record["timestamp"] = int(round(stamp))
            out.append((stamp, int(position), record))
    out.sort(key=lambda item: (item[0], item[1]))
    return [record for _, _, record in out]
