"""Benchmark: prefix screening on a real-trace sweep (issue: sweeps on real traces).

The shipped Mooncake-format trace (3,993 requests over 17 min, prompts up to 40k tokens) played at
half speed (`arrival_speedup_ratio: 0.5`): at full speed it overloads every layout of 8 H200 for
Qwen3-32B (2 x TP4: mean TTFT 62 s), at half speed 2 x TP4 meets the SLA and the smaller layouts
queue. Agg + disagg, vLLM + SGLang, both routers, goodput per GPU under a mean TTFT 3 s / ITL 60 ms
SLA, 5 rounds x 5 candidates per branch (50 trials). The same config and seed run with the default screen (first 20 % of the trace's
simulated time, stopped at 2x a bound) and with `screen_fraction: null`. Each is run 3 times from
scratch; the median wall is shown with its runs. Printed per variant: wall, the sum of the
feasible trials' replay time and the ratio of the two, the slowest trial, how many trials were
screened, timed out or failed, and the best score.

Run: .venv/bin/python bench/screening.py [--variants screened,unscreened]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import yaml
from timed_sweep import timed_sweep

REPO = Path(__file__).resolve().parents[1]
CORES, RUNS = 2, 3


def config(screen: bool) -> dict:
    data = yaml.safe_load((REPO / "config" / "default.yaml").read_text())
    data["workload"] = {
        "trace_path": str(REPO / "data" / "traces" / "mooncake_synthetic_trace.jsonl"),
        "arrival_speedup_ratio": 0.5,
    }
    data["goal"] = {"target": "goodput_per_gpu", "sla": {"ttft_ms": 3000, "itl_ms": 60}}
    data["sweep"] = {"max_rounds": 5, "candidates_per_round": 5, "seed": 3, "parallel_evals": 2}
    if not screen:
        data["sweep"]["screen_fraction"] = None
    return data


def sweep(data: dict) -> dict:
    def read(run: Path) -> dict:
        trials = [json.loads(p.read_text())["result"] for p in run.glob("rounds/*/*/trials/*/*.json")]
        return {"trials": trials, "best": json.loads((run / "summary.json").read_text())["best_score"]}

    wall, found = timed_sweep(data, CORES, read, allowed=(0, 1))
    return {"wall": wall, **found}


def row(name: str, runs: list[dict]) -> str:
    runs = sorted(runs, key=lambda r: r["wall"])
    median = runs[len(runs) // 2]
    trials = median["trials"]
    feasible = sum(t["replay_seconds"] for t in trials if t["status"] == "feasible")
    slowest = max(t["wall_seconds"] for t in trials)
    screened = sum(1 for t in trials if (t.get("screen") or {}).get("screened"))
    timed_out = sum(1 for t in trials if t["status"] == "timed_out")
    stalled = sum(1 for t in trials if t["status"] == "timed_out" and (t.get("reason") or "").startswith("stalled"))
    failed = sum(1 for t in trials if t["status"] == "failed")
    best = {f"{r['best']:.2f}" if r["best"] is not None else "none" for r in runs}
    walls = ", ".join(f"{r['wall']:.0f}" for r in runs)
    return (
        f"| {name} | {len(trials)} | {median['wall']:.0f} | {walls} "
        f"| {feasible:.0f} | {median['wall'] / feasible if feasible else float('inf'):.2f} | {slowest:.1f} "
        f"| {screened} | {timed_out} ({stalled}) | {failed} "
        f"| {', '.join(sorted(best))} |"
    )


def main() -> None:
    args = sys.argv[1:]
    chosen = args[args.index("--variants") + 1].split(",") if "--variants" in args else ["screened", "unscreened"]
    print("| variant | trials | wall, median of 3 (s) | runs (s) | feasible replays, sum (s) | wall / feasible "
          "| slowest trial (s) | screened | timed out (stalled) | failed | best score (all runs) |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for name, screen in (("screened", True), ("unscreened", False)):
        if name in chosen:
            print(
                row(name + (" (default)" if screen else ""), [sweep(config(screen)) for _ in range(RUNS)]), flush=True
            )


if __name__ == "__main__":
    main()
