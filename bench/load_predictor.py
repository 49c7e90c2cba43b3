"""Benchmark: the load-predictor stage, all 11 presets x 2 intervals on the shared Mooncake trace.

Runs the real workflow (validate, policies, 22 scoring jobs, merge) with `--cores 2` in a scratch
folder, once for the presets' own intervals (180 s and 600 s) and once for 60 s and 180 s (more
windows, so ARIMA and Prophet do more work). Wall time from the first job to the merge.
Run: .venv/bin/python bench/load_predictor.py   (results are written to docs/benchmarks/stages.md by hand)
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
TRACE = REPO / "data" / "traces" / "mooncake_synthetic_trace.jsonl"


def policy(seconds: int) -> dict:
    return {
        "enable_throughput_scaling": True,
        "enable_load_scaling": False,
        "throughput_adjustment_interval_seconds": seconds,
        "load_adjustment_interval_seconds": None,
    }


def run(intervals: tuple[int, int]) -> None:
    config = {
        "search_space": {
            "model_name": "Qwen/Qwen3-32B",
            "hardware_sku": "h200_sxm",
            "deployment_mode": ["agg"],
            "planner_scaling_policy": [policy(s) for s in intervals],
        },
        "workload": {"trace_path": str(TRACE)},
        "goal": {"target": "goodput", "sla": {"ttft_ms": 2000, "itl_ms": 50}},
    }
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "lp.yaml"
        path.write_text(yaml.safe_dump(config))
        target = "results/bench/load_predictor.json"
        command = [
            sys.executable,
            "-m",
            "snakemake",
            target,
            "--snakefile",
            str(REPO / "workflow" / "Snakefile"),
            "--cores",
            "2",
            "--directory",
            folder,
            "--config",
            f"spica={path}",
            "run=bench",
        ]
        started = time.perf_counter()
        subprocess.run(command, check=True, capture_output=True)
        wall = time.perf_counter() - started
        result = json.loads((Path(folder) / target).read_text())
        scores = [
            json.loads(p.read_text()) for p in (Path(folder) / "results/bench/load_predictor/scores").rglob("*.json")
        ]
        job_seconds = sum(s["seconds"] for s in scores)
        finite = sum(s["loss"] is not None for s in scores)
        print(
            f"| {intervals[0]} s + {intervals[1]} s | {len(scores)} | {wall:.1f} | {job_seconds:.1f} | {finite} | {result['best_by_interval']} |"
        )


def main() -> None:
    print(
        "| intervals | scoring jobs | workflow wall at --cores 2 (s) | sum of job times (s) | finite losses | winners |"
    )
    print("|---|---|---|---|---|---|")
    for intervals in ((180, 600), (60, 180)):
        run(intervals)


if __name__ == "__main__":
    main()
