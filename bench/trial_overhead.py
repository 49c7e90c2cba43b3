"""Benchmark: what one trial costs in a warm replay worker, beyond the replay itself.

For 1k and 10k requests, in one worker warmed once (as a replay job is): the replay inside the
Dynamo call in the forked child, the fork and the report over the pipe (the child's wall minus the
replay), and writing the trial's journal entry and trial file. A cold replay (a fresh process: the
cost every trial paid before the worker) is shown for scale. Median of 3 each.
Run: .venv/bin/python bench/trial_overhead.py
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("DYN_LOG", "error")

from spica_lib.base.artifacts import write_model  # noqa: E402
from spica_lib.config import SmartSearchConfig  # noqa: E402
from spica_lib.facts.parallel import ParallelShape, ReplicaConfig  # noqa: E402
from spica_lib.trial.evaluate import evaluate_trials, prepare_trial  # noqa: E402
from spica_lib.trial.spec import TrialRecord  # noqa: E402

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


def cold_replay(spec) -> float:
    """A fresh process replaying the spec once: Python start, Dynamo import, perf-DB load, replay."""
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "-c", COLD, spec.model_dump_json()], check=True, capture_output=True, env=os.environ.copy()
    )
    return time.perf_counter() - started


COLD = """
import sys
from spica_lib.replay.call import execute_call
from spica_lib.replay.request import replay_call
from spica_lib.trial.spec import TrialSpec
execute_call(replay_call(TrialSpec.model_validate_json(sys.argv[1]).replay))
"""


def main() -> None:
    print("| requests | cold replay, fresh process (s) | warm-up, once per job (s) | replay in the forked child (s) "
          "| fork + report (s) | journal + trial file write (s) | trial wall in a warm job (s) |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    for requests in (1_000, 10_000):
        spec = spec_for(requests)
        cold = statistics.median(cold_replay(spec) for _ in range(REPEATS))
        warmed: list[float] = []
        specs = {f"copy{i}": spec for i in range(REPEATS)}
        results = dict(evaluate_trials(specs, max_eval_seconds=600, warm=True, on_warm=warmed.append))
        assert all(r.status == "feasible" for r in results.values())
        replay = statistics.median(r.replay_seconds for r in results.values())
        child = statistics.median(r.wall_seconds - r.replay_seconds for r in results.values())
        writes = []
        with tempfile.TemporaryDirectory() as folder:
            for key, result in results.items():
                record = TrialRecord(key=key, spec=spec, result=result)
                started = time.perf_counter()
                write_model(Path(folder) / "journal" / f"{key}.json", record)
                write_model(Path(folder) / "trials" / f"{key}.json", record)
                writes.append(time.perf_counter() - started)
        write = statistics.median(writes)
        print(
            f"| {requests:,} | {cold:.2f} | {warmed[0]:.2f} | {replay:.2f} | {child:.3f} | {write:.3f} "
            f"| {replay + child + write:.2f} |"
        )


if __name__ == "__main__":
    main()
