"""Benchmark: a whole default-space sweep on a day-scale trace, searched on a sample, decided on the whole day
(docs/benchmarks/search-sample.md).

The trace: bench/day_trace.py's day of --requests arrivals (diurnal, the shipped Mooncake trace's lengths and
blocks). The sweep: the default space on 16 H200 (vLLM + SGLang, agg + disagg, both routers), goodput per GPU
under a mean TTFT 5 s / ITL 50 ms SLA, 3 rounds x 4 per branch, `sweep.search_sample: auto` (the size rule's
stratified sample searched: 2,778 of 100,000, taken as whole stretches), the finish on the whole day: one look of 4 resamples of it for each of the top 4
(`finish_max_samples: 4`, 16 whole-day replays: the finish sized for a day, see the docs), no baselines. Run with
`spica run --cores 2` from scratch (aiconfigurator's answer searched too). Printed: the wall, the search's part
(to its last tell) and what follows, the replays of each, the recommendation and its fresh statistic.

Run: .venv/bin/python bench/day_sweep.py [--requests 100000]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

from day_trace import day_trace  # noqa: E402
from robust_answers import SPACE  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=100_000)
    args = parser.parse_args()
    trace = day_trace(args.requests)
    data = {"search_space": {**SPACE, "gpu_budget": 16}, "workload": {"trace_path": str(trace)},
            "goal": {"target": "goodput_per_gpu", "sla": {"ttft_ms": 5000, "itl_ms": 50}},
            "sweep": {"max_rounds": 3, "candidates_per_round": 4, "parallel_evals": 2, "search_sample": "auto",
                      "finish_max_samples": 4, "baselines": False}}  # fmt: skip
    with tempfile.TemporaryDirectory() as folder:
        config = Path(folder) / "day.yaml"
        config.write_text(yaml.safe_dump(data))
        started = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "spica_lib.cli", "run", str(config), "--cores", "2"], cwd=folder,
                              capture_output=True, text=True, check=False)  # fmt: skip
        wall = time.perf_counter() - started
        if done.returncode != 0:
            raise SystemExit(done.stderr[-3000:])
        run = next((Path(folder) / "results").iterdir())
        summary = json.loads((run / "summary.json").read_text())
        tells = [p.stat().st_mtime for p in run.glob("rounds/*/*/observations.json")]
        search = max(tells) - min(p.stat().st_mtime for p in run.glob("config.json")) if tells else float("nan")
        best = next((f for f in summary.get("finish") or [] if f.get("recommended")), None)
        print(f"{args.requests} requests, searched on {summary.get('search_requests', 'its sample')}: wall {wall:.0f} s "
              f"({wall / 60:.1f} min); search to the last tell about {search:.0f} s; {summary.get('finish_stopped')}")  # fmt: skip
        if best is not None:
            print(f"recommended {best['key'][:12]} (search score on the sample {best['search_score']:.1f}, fresh statistic on "
                  f"the whole day {best['statistic']:.1f}, {best['samples']} resamples)")  # fmt: skip
        print(summary.get("line", ""))


if __name__ == "__main__":
    main()
