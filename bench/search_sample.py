"""Benchmark: does a search on a sample of a trace order deployments as a search on the whole trace does?
(docs/benchmarks/search-sample.md)

For each trace and seed, with early stops and pruning off (every trial gets a full score; `screen_fraction` off):
  1. the sampled search: the default space's rounds (2 branches x 3 rounds x 4, real Vizier, real replays, in this
     process: bench/robust_answers.py's `search`) on the search's sample (`sweep.search_sample`, traces/sample.py);
  2. every trial of it replayed again on the whole trace;
  3. the whole-trace search, the same seed and rounds.
Printed per trace, over the seeds: Kendall's tau between the sampled trials' sample and whole-trace scores (median,
worst), top-5 recall (of the sampled search's five best by whole-trace score, how many its sample ranked in its own
top 5), and whether the recommendation is the same: the sampled search's finish takes its top 4 by sample score
and decides on the whole trace (here: the best whole-trace score of those 4, the finish's statistic on the trace
itself), the whole-trace search's is its best whole-trace score; the same when they are one deployment or replay
to the same numbers (trial/outcome.py), or the sampled one's whole-trace score is within 1 % of the other's.
(Seconds are not compared here: the whole search reuses the whole-trace replays of step 2. The walls of
sampled and whole sweeps are measured by bench/sweep_overhead.py.)

Traces: the 12k-request conversation trace (bench/conversation_trace.py), the shipped Mooncake trace (3,993
requests: under the rule's threshold, so `auto` searches it whole; sampled here at the rule's 2,000 all the same,
to measure), and bench/day_trace.py's day traces (--day 12000,100000; the 100k one is slow: --day-seeds).

Run: .venv/bin/python bench/search_sample.py [--traces conversation,mooncake,day] [--seeds 10] [--day 12000]
     [--day-seeds 3] [--size 2000]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("DYN_LOG", "error")
REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from robust_answers import SPACE, TRACE, Replays, conversation_trace, search  # noqa: E402

from spica_lib.config import SmartSearchConfig  # noqa: E402
from spica_lib.traces.scan import scan_trace  # noqa: E402
from spica_lib.trial.outcome import result_outcome, same_outcome  # noqa: E402

FINISH_TOP = 4


def config(trace: str, seed: int, sample: int | str) -> SmartSearchConfig:
    data = {"search_space": {**SPACE, "gpu_budget": 16}, "workload": {"trace_path": trace},
            "goal": {"target": "goodput_per_gpu", "sla": {"ttft_ms": 5000, "itl_ms": 50}},
            "sweep": {"max_rounds": 3, "candidates_per_round": 4, "parallel_evals": 2, "seed": seed,
                      "screen_fraction": None, "search_sample": sample, "baselines": False}}  # fmt: skip
    return SmartSearchConfig.from_mapping(data)


def kendall(a: list[float], b: list[float]) -> float | None:
    from scipy.stats import kendalltau

    if len(a) < 2:
        return None
    tau = kendalltau(a, b).statistic
    return None if tau != tau else float(tau)


def one_seed(trace: str, seed: int, size: int | str, replays: Replays) -> dict:
    started = time.perf_counter()
    sampled = config(trace, seed, size)
    records, ranked = search(sampled, replays)
    sample_seconds = time.perf_counter() - started
    whole_specs = {}
    for key, record in records.items():
        if record.result.status == "feasible":
            replay = record.spec.replay
            whole_specs[key] = record.spec.model_copy(update={
                "replay": replay.model_copy(update={"workload": replay.workload.whole, "screen": None}),
                "trace_sha256": scan_trace(replay.workload.whole.trace_path).sha256})  # fmt: skip
    whole_results = replays.many(whole_specs)
    whole_score = {k: r.score if r.status == "feasible" else None for k, r in whole_results.items()}
    both = [k for k in whole_specs if whole_score[k] is not None]
    tau = kendall([records[k].result.score for k in both], [whole_score[k] for k in both])
    by_sample = sorted(both, key=lambda k: -records[k].result.score)
    by_whole = sorted(both, key=lambda k: -whole_score[k])
    recall = len(set(by_sample[:5]) & set(by_whole[:5])) / min(5, len(both)) if both else None
    finished = max(by_sample[:FINISH_TOP], key=lambda k: whole_score[k]) if both else None
    started = time.perf_counter()
    full_records, full_ranked = search(config(trace, seed, "full"), replays)
    full_seconds = time.perf_counter() - started
    full_best = full_ranked[0].key if full_ranked else None
    same = None
    if finished is not None and full_best is not None:
        mine, theirs = whole_results[finished], full_records[full_best].result
        same = finished == full_best or same_outcome(result_outcome(mine), result_outcome(theirs)) or (
            mine.score >= 0.99 * theirs.score)  # fmt: skip
    requests = sampled.workload.search_requests
    return {"tau": tau, "recall": recall, "same": same, "sample_seconds": sample_seconds, "full_seconds": full_seconds,
            "requests": requests, "trials": len(both)}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--traces", default="conversation,mooncake,day")
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--day", default="12000")
    parser.add_argument("--day-seeds", type=int, default=3)
    parser.add_argument("--size", default="2000")
    args = parser.parse_args()
    size: int | str = int(args.size) if args.size.isdigit() else args.size
    traces: list[tuple[str, str, int]] = []
    for name in args.traces.split(","):
        if name == "conversation":
            traces.append(("conversation (12,031)", conversation_trace(), args.seeds))
        elif name == "mooncake":
            traces.append(("Mooncake (3,993)", str(TRACE), args.seeds))
        elif name == "day":
            from day_trace import day_trace

            for count in (int(c) for c in args.day.split(",")):
                traces.append((f"day ({count:,})", str(day_trace(count)), args.day_seeds if count > 20_000 else args.seeds))
    print("| trace | sample | seeds | trials with both scores (median) | tau median, worst | top-5 recall median, worst "
          "| same recommendation |")
    print("|---|---:|---:|---:|---|---|---:|")
    for label, trace, seeds in traces:
        replays = Replays(limit=3600)
        rows = [one_seed(trace, seed, size, replays) for seed in range(1, seeds + 1)]
        taus = [r["tau"] for r in rows if r["tau"] is not None]
        recalls = [r["recall"] for r in rows if r["recall"] is not None]
        same = sum(bool(r["same"]) for r in rows)
        print(f"| {label} | {rows[0]['requests']} | {seeds} | {statistics.median(r['trials'] for r in rows):g} | "
              f"{statistics.median(taus):.2f}, {min(taus):.2f} | {statistics.median(recalls):.2f}, {min(recalls):.2f} | "
              f"{same} / {seeds} |", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
