"""Benchmark: how far a block-bootstrap resample of a trace moves from the trace.

Results: docs/benchmarks/finish.md, "Fresh traffic from a trace".

For each trace (the shipped Mooncake trace; with --conversation also the 12k-request conversation-shaped trace
of bench/conversation_trace.py), draws --resamples resamples exactly as the finish does
(traces/resample.py: ten windows of at least a minute, drawn with replacement, a repeated window's ids
renamed unless a window laid earlier uses them) and prints, over them, the largest and the 95th-percentile
change of: the request count (and so the rate: the span is the trace's), the mean input and output length, the
Kolmogorov-Smirnov distance of the input- and output-length distributions, and the share of KV blocks that reuse
an earlier block (the prefix reuse the replay's cache sees), next to the trace's own. Then, side by side on the
same draws, the share of block occurrences that hit a block only another copy of the same window had written
(reuse another day would not have): with today's rule, and with format 1's (an id renamed in a repeated copy
only when the trace uses it in one window). tests/test_trace_resample.py asserts the shipped trace's bounds,
rounded up from this table.

Run: .venv/bin/python bench/trace_resample.py [--resamples 200] [--conversation]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
from scipy.stats import ks_2samp

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from spica_lib.traces.scan import scan_trace  # noqa: E402
from spica_lib.traces.resample import blocks_for, resample_plan, resampled_records  # noqa: E402

TRACE = REPO / "data" / "traces" / "mooncake_synthetic_trace.jsonl"


def reuse_share(records: list[dict]) -> float:
    ids = [h for r in records for h in r.get("hash_ids") or []]
    return 1 - len(set(ids)) / len(ids) if ids else 0.0


def copy_only_hits(plan, ids: list[list[int]]) -> float:
    """The share of block occurrences whose block only other copies of the same window had used before."""
    writers: dict[int, set[tuple[int, int]]] = {}
    hits = total = 0
    for placed, record_ids in zip(plan, ids, strict=True):
        me = (placed.window, placed.copy)
        for block_id in record_ids:
            before = writers.setdefault(block_id, set())
            total += 1
            hits += bool(before) and all(w == placed.window and c != placed.copy for w, c in before)
            before.add(me)
    return hits / total if total else 0.0


def format_1_ids(records: list[dict], plan) -> list[list[int]]:
    """The ids format 1 gave the same draws: renamed in a repeated copy only if the trace uses them in one window."""
    windows: dict[int, set[int]] = {}
    for placed in plan:
        for block_id in records[placed.position].get("hash_ids") or []:
            windows.setdefault(block_id, set()).add(placed.window)
    every = [h for r in records for h in r.get("hash_ids") or []]
    stride = max(every, default=0) + 1
    out = []
    for placed in plan:
        record_ids = records[placed.position].get("hash_ids") or []
        out.append([h + placed.copy * stride if placed.copy and len(windows[h]) == 1 else h for h in record_ids])
    return out


def table(name: str, path: Path, resamples: int) -> None:
    records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    blocks = blocks_for(scan_trace(path).duration_ms)
    inputs, outputs = (np.array([r[k] for r in records]) for k in ("input_length", "output_length"))
    rows, hits_now, hits_before = [], [], []
    for index in range(resamples):
        sample = resampled_records(records, blocks, np.random.default_rng([7, index]))
        plan = resample_plan(records, blocks, np.random.default_rng([7, index]))  # the same draws, with provenance
        hits_now.append(copy_only_hits(plan, [r.get("hash_ids") or [] for r in sample]))
        hits_before.append(copy_only_hits(plan, format_1_ids(records, plan)))
        fresh_in, fresh_out = (np.array([r[k] for r in sample]) for k in ("input_length", "output_length"))
        rows.append([
            len(sample) / len(records) - 1,
            fresh_in.mean() / inputs.mean() - 1,
            ks_2samp(fresh_in, inputs).statistic,
            fresh_out.mean() / outputs.mean() - 1,
            ks_2samp(fresh_out, outputs).statistic,
            reuse_share(sample) - reuse_share(records),
        ])  # fmt: skip
    moves = np.abs(np.array(rows))
    names = ["requests", "mean ISL", "KS ISL", "mean OSL", "KS OSL", "block reuse (points)"]
    print(f"{name}: {len(records)} requests, {scan_trace(path).duration_ms / 1000:.0f} s, {blocks} windows; "
          f"its own block reuse {reuse_share(records):.1%}; over {resamples} resamples:")  # fmt: skip
    for label, column in zip(names, moves.T, strict=True):
        relative = label.startswith(("requests", "mean"))
        shown = (lambda v: f"{v:.1%}") if relative or "reuse" in label else (lambda v: f"{v:.3f}")
        print(f"  {label:<22} largest {shown(column.max())}, p95 {shown(np.percentile(column, 95))}")
    print(f"  hits on a block only another copy wrote: mean {np.mean(hits_now):.2%}, largest {np.max(hits_now):.2%} "
          f"(format 1 on the same draws: mean {np.mean(hits_before):.2%}, largest {np.max(hits_before):.2%})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--resamples", type=int, default=200)
    parser.add_argument("--conversation", action="store_true")
    args = parser.parse_args()
    table("shipped Mooncake trace", TRACE, args.resamples)
    if args.conversation:
        from conversation_trace import conversation_trace

        table("conversation-shaped trace", conversation_trace(), args.resamples)


if __name__ == "__main__":
    main()
