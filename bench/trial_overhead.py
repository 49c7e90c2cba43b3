"""Benchmark: what a trial costs beyond the replay itself (child process, imports, serialisation).

For 1k and 10k requests: the bare Dynamo replay call as the trial's child process makes it (a fresh
process, so it includes Dynamo loading the perf DB, which any replay in a new process pays), the
whole `evaluate_trial` wall time, and our overhead = the difference. The same call in an already
warm process is shown for scale. Median of 3 runs each.
Run: .venv/bin/python bench/trial_overhead.py   (results are written to docs/benchmarks.md by hand)
"""

from __future__ import annotations

import os
import statistics
import time

os.environ.setdefault("DYN_LOG", "error")

from spica_lib.config import SmartSearchConfig  # noqa: E402
from spica_lib.facts.parallel import ParallelShape, ReplicaConfig  # noqa: E402
from spica_lib.replay.request import run_replay  # noqa: E402
from spica_lib.trial.evaluate import evaluate_trial, prepare_trial  # noqa: E402

REPEATS = 3


def spec_for(requests: int):
    rate = 12.0
    config = SmartSearchConfig.from_mapping(
        {
            "search_space": {"model_name": "Qwen/Qwen3-32B", "hardware_sku": "h200_sxm", "gpu_budget": 8},
            "workload": {"isl": 2048, "osl": 256, "request_rate": rate, "num_request_ratio": requests / rate},
            "goal": {"target": "goodput_per_gpu", "sla": {"ttft_ms": 2000, "itl_ms": 50}},
        }
    )
    selection = {
        "deployment_mode": "agg",
        "backend": "vllm",
        "agg_max_num_batched_tokens": 8192,
        "agg_max_num_seqs": 256,
        "router_mode": "round_robin",
        "planner_scaling_policy": "disabled",
    }
    layout = ReplicaConfig(shape=ParallelShape(tp=2), replicas=4)
    return prepare_trial(config, selection, layout, backend_version="0.24.0")


def main() -> None:
    print(
        "| requests | replay call, warm process (s) | replay call in the trial's fresh process (s) | evaluate_trial wall (s) | our overhead (s) | overhead (%) |"
    )
    print("|---|---|---|---|---|---|")
    for requests in (1_000, 10_000):
        spec = spec_for(requests)
        run_replay(spec.replay)  # warm: imports and aiconfigurator engine caches in this process
        warm, cold, wall = [], [], []
        for _ in range(REPEATS):
            started = time.perf_counter()
            run_replay(spec.replay)
            warm.append(time.perf_counter() - started)
            result = evaluate_trial(spec, max_eval_seconds=600)
            assert result.status == "feasible", result.reason
            cold.append(result.replay_seconds)
            wall.append(result.wall_seconds)
        c, w = statistics.median(cold), statistics.median(wall)
        print(
            f"| {requests:,} | {statistics.median(warm):.2f} | {c:.2f} | {w:.2f} | {w - c:.2f} | {100 * (w - c) / c:.1f} |"
        )


if __name__ == "__main__":
    main()
