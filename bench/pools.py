"""Benchmark: building the candidate pools (stage `branches`) for two models at three budgets.

Each case runs in a fresh process, so it pays the perf-DB loading a real stage job pays.
Run: .venv/bin/python bench/pools.py   (results are written to docs/benchmarks/stages.md by hand)
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

CASES = [(model, budget) for model in ("Qwen/Qwen3-32B", "Qwen/Qwen3-30B-A3B") for budget in (8, 16, 32)]
BACKENDS = ["vllm", "sglang", "trtllm"]

CHILD = """
import json, sys, time
start = time.perf_counter()
from spica_lib.pools import branches as stage
from spica_lib.facts import kv_capacity
from spica_lib.config import SmartSearchConfig
imported = time.perf_counter()
model, budget, backends = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3])
config = SmartSearchConfig.from_mapping({
    "search_space": {"model_name": model, "hardware_sku": "h200_sxm", "gpu_budget": budget,
                     "backend": backends, "deployment_mode": ["agg", "disagg"]},
    "workload": {"isl": 1024, "osl": 128, "request_rate": 1.0, "num_request_ratio": 1},
})
calls, seconds = [0], [0.0]
original = kv_capacity.KvEstimator._call
def timed(self, *args):
    t = time.perf_counter()
    try:
        return original(self, *args)
    finally:
        calls[0] += 1
        seconds[0] += time.perf_counter() - t
kv_capacity.KvEstimator._call = timed
built = stage.enumerate_branches(config)
done = time.perf_counter()
print(json.dumps({
    "import_s": imported - start, "build_s": done - imported, "estimator_calls": calls[0],
    "estimator_s": seconds[0], "pool": {b.spec.deployment_mode: b.spec.pool_size for b in built},
}))
"""


def main() -> None:
    print(
        "| model | budget | process wall (s) | imports (s) | pools (s) | estimator calls | in estimator (s) | agg / disagg layouts |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for model, budget in CASES:
        start = time.perf_counter()
        out = subprocess.run(
            [sys.executable, "-c", CHILD, model, str(budget), json.dumps(BACKENDS)],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        wall = time.perf_counter() - start
        r = json.loads(out.strip().splitlines()[-1])
        print(
            f"| {model} | {budget} | {wall:.1f} | {r['import_s']:.1f} | {r['build_s']:.1f} | {r['estimator_calls']} "
            f"| {r['estimator_s']:.1f} | {r['pool']['agg']} / {r['pool']['disagg']} |"
        )


if __name__ == "__main__":
    main()
