"""Benchmark: where the replay's cost explodes (issue: sweeps on real traces).

One hopeless candidate of the screening benchmark (bench/screening.py: the shipped Mooncake-format
trace at half speed; SGLang disagg, 1 prefill TP4 + 1 decode TP4, round robin, Qwen3-32B on H200)
replayed on growing prefixes of its simulated time (`max_sim_time_ms`), warm, each in a forked
child stopped at 30 s. Per prefix: the requests arrived and completed by then (their difference is
the queue still in the system), the completed requests' mean TTFT, and the replay's wall time
(median of 3; a prefix stopped at the limit is not repeated). The prefix screen sees the first
20 %; this shows why a screen alone cannot stop such a replay, and what the pace check
(spica_lib/replay/stall.py) reacts to.

Run: .venv/bin/python bench/replay_cost.py
"""

from __future__ import annotations

import os
import statistics
import sys
from pathlib import Path

import yaml

os.environ.setdefault("DYN_LOG", "error")
REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from spica_lib.cli.candidate import candidate_selection  # noqa: E402
from spica_lib.config import SmartSearchConfig  # noqa: E402
from spica_lib.facts.catalog import resolve_backend_version  # noqa: E402
from spica_lib.replay.request import replay_call  # noqa: E402
from spica_lib.replay.worker import ReplayWorker  # noqa: E402
from spica_lib.trial.evaluate import prepare_trial  # noqa: E402

FRACTIONS = (0.1, 0.2, 0.4, 0.5, 0.6, 0.65, 0.7, 0.8, 1.0)
LIMIT_SECONDS, RUNS = 30.0, 3
CANDIDATE = {"deployment_mode": "disagg", "backend": "sglang", "router_mode": "round_robin",
             "parallel": {"prefill": {"tp": 4, "replicas": 1}, "decode": {"tp": 4, "replicas": 1}}}  # fmt: skip


def the_call() -> tuple[dict, float]:
    data = yaml.safe_load((REPO / "config" / "default.yaml").read_text())
    data["workload"] = {
        "trace_path": str(REPO / "data" / "traces" / "mooncake_synthetic_trace.jsonl"),
        "arrival_speedup_ratio": 0.5,
    }
    data["goal"] = {"target": "goodput_per_gpu", "sla": {"ttft_ms": 3000, "itl_ms": 60}}
    config = SmartSearchConfig.from_mapping(data)
    selection, layout = candidate_selection(config, CANDIDATE)
    version = resolve_backend_version(config.search_space.hardware_sku, "sglang")
    spec = prepare_trial(config, selection, layout, backend_version=version)
    call = {**replay_call(spec.replay), "screen": None}
    span_ms = spec.replay.screen.sim_time_ms / 0.2  # the screen holds 20 % of the simulated span
    return call, span_ms


def main() -> None:
    call, span_ms = the_call()
    print(f"simulated span {span_ms / 1000:.0f} s; each prefix stopped at {LIMIT_SECONDS:.0f} s of wall time\n")
    print("| prefix of simulated time | arrived | completed | in the system | mean TTFT of completed (s) "
          "| wall, median of 3 (s) | runs (s) |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    with ReplayWorker(parallel=1, timeout=LIMIT_SECONDS) as worker:
        worker.warm({"call": call})
        for fraction in FRACTIONS:
            prefix = {**call, "kwargs": {**call["kwargs"], "max_sim_time_ms": fraction * span_ms}}
            walls, metrics = [], {}
            for _ in range(RUNS):
                (outcome,) = list(worker.run({"prefix": prefix}))
                walls.append(outcome.wall_seconds)
                if outcome.status != "ok":
                    break
                metrics = outcome.report["outcome"]["metrics"]
            if metrics and len(walls) == RUNS:
                arrived, done = int(metrics["num_requests"]), int(metrics["completed_requests"])
                print(f"| {fraction:.0%} | {arrived} | {done} | {arrived - done} | {metrics['mean_ttft_ms'] / 1000:.1f} "
                      f"| {statistics.median(walls):.2f} | {', '.join(f'{w:.2f}' for w in walls)} |", flush=True)  # fmt: skip
            else:
                print(f"| {fraction:.0%} | | | | | > {LIMIT_SECONDS:.0f} (stopped) | {walls[-1]:.0f} |", flush=True)


if __name__ == "__main__":
    main()
