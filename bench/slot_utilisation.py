"""Benchmark: how busy a sweep keeps its replay slots, barrier rounds against rounds in flight.

A control-flow benchmark: the replays are stand-ins. Every trial is really replayed (the embedded
default workload, a fraction of a second) and then held until its wall time reaches a duration drawn
from a log-normal with p50 2.3 s and p90 6.5 s (NVIDIA's published per-candidate replay times of a day
of traffic, p50 230 s and p90 650 s, divided by 100; spica_lib/replay/stand_in.py). Real replays of that
size would take hours per run; their spread, which is what a round barrier wastes, is kept.

One branch (agg), 64 trials on 8 slots (`parallel_evals: 8`, `spica run --cores 8`), no finish,
baselines or stress test. Variants: barrier rounds (8 rounds of 8) and `rounds_in_flight` W with one
trial per round (64 rounds). Slot utilisation = sum of the trials' replay wall / (wall x 8), for the
whole sweep and for its search (round 0's suggestions to the last round's tell). Each variant is run 3
times from scratch; the run of median sweep wall is shown, with every run's wall.

It also prints what the scheduling alone allows, simulated with no overhead at all (1,000 draws of
the 64 durations): barrier rounds, rounds in flight, and an ideal that starts a new trial the moment
any slot frees (no round structure, no determinism). With 64 trials on 8 slots and this spread, even
the ideal leaves slots idle while the last, longest trials finish.

`--slurm`: the same on the one-node cluster of .ci/slurm-up.sh with the shipped profile (pilot jobs),
on 2 slots (the node has 2 CPUs): 32 trials, 2 pilots of 1 CPU, one trial per replay job.

Run: .venv/bin/python bench/slot_utilisation.py [--slurm] [--variants 1x8,8x1,16x1,32x1]  (rounds in flight x per round)
"""

from __future__ import annotations

import heapq
import json
import math
import sys
from pathlib import Path

import yaml
from timed_sweep import timed_sweep

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from spica_lib.config.narrow import narrowed  # noqa: E402

SLOTS, TRIALS, RUNS = 8, 64, 3
STAND_IN = "2.3,6.5"  # p50, p90 in seconds
EXECUTOR: list[str] | None = None  # --cores SLOTS; --slurm sets the profile
SLURM_SLOTS, SLURM_TRIALS = 2, 32
SLURM = [
    "--profile", str(REPO / "profiles" / "slurm"), "--",
    "--set-threads", "replay=1",  # one CPU per replay job, so each pilot is one slot
    "--set-resources", f"replay:pilots={SLURM_SLOTS}", "replay:trials_per_job=1",  # a trial per job: a slot each
]  # fmt: skip


def config(in_flight: int, per_round: int) -> dict:
    data = yaml.safe_load((REPO / "config" / "default.yaml").read_text())
    data["search_space"] = narrowed(data["search_space"], deployment_mode=["agg"])
    data["sweep"] = {
        "max_rounds": TRIALS // per_round,
        "candidates_per_round": per_round,
        "rounds_in_flight": in_flight,
        "parallel_evals": SLOTS,
        "max_eval_seconds": 120,
        "seed": 0,
        "finish_samples": 0,
        "baselines": False,
        "stress_top": 0,
    }
    return data


def sweep(data: dict) -> dict:
    def read(run: Path) -> dict:
        trials = [json.loads(p.read_text())["result"] for p in run.glob("rounds/*/*/trials/*/*.json")]
        first = (run / "rounds" / "agg" / "0" / "suggestions.json").stat().st_mtime
        last = max(p.stat().st_mtime for p in run.glob("rounds/agg/*/observations.json"))
        best = json.loads((run / "summary.json").read_text())["best_score"]
        return {"search": last - first, "busy": sum(t["wall_seconds"] for t in trials), "trials": len(trials),
                "best": best}  # fmt: skip

    wall, found = timed_sweep(data, SLOTS, read, env={"SPICA_STAND_IN_DURATION": STAND_IN}, executor=EXECUTOR)
    return {"wall": wall, **found}


def simulated(in_flight: int, per_round: int, durations: list[float], slot_count: int | None = None) -> float:
    """Utilisation of rounds in flight with no overhead: round k starts once rounds <= k - W are done."""
    ends: list[float] = []
    slot_count = slot_count or SLOTS
    slots = [0.0] * slot_count
    done_by = 0.0  # when every round up to k - W has ended
    for k in range(len(durations) // per_round):
        if k >= in_flight:
            done_by = max(done_by, ends[k - in_flight])
        round_ends = []
        for d in durations[k * per_round : (k + 1) * per_round]:
            start = max(done_by, heapq.heappop(slots))
            round_ends.append(start + d)
            heapq.heappush(slots, start + d)
        ends.append(max(round_ends))
    return sum(durations) / (max(ends) * slot_count)


def greedy(durations: list[float], slot_count: int | None = None) -> float:
    """Utilisation when each trial starts the moment a slot frees (the bound for any online order)."""
    slot_count = slot_count or SLOTS
    slots = [0.0] * slot_count
    for d in durations:
        heapq.heappush(slots, heapq.heappop(slots) + d)
    return sum(durations) / (max(slots) * slot_count)


def simulation(variants: list[tuple[int, int]]) -> None:
    import numpy as np

    p50, p90 = (float(v) for v in STAND_IN.split(","))
    rng = np.random.default_rng(0)
    draws = [list(rng.lognormal(math.log(p50), math.log(p90 / p50) / 1.2816, TRIALS)) for _ in range(1000)]
    print(f"\nScheduling alone (simulated, no overhead; median over 1,000 draws of the {TRIALS} durations):\n")
    print("| rounds | utilisation |\n|---|---|")
    for in_flight, per_round in variants:
        print(f"| {name_of(in_flight, per_round)} | {np.median([simulated(in_flight, per_round, d) for d in draws]):.0%} |")
    print(f"| ideal: a new trial whenever a slot frees | {np.median([greedy(d) for d in draws]):.0%} |")


def name_of(in_flight: int, per_round: int) -> str:
    rounds = f"{TRIALS // per_round} x {per_round}"
    return f"barrier, {rounds}" if in_flight == 1 else f"{in_flight} in flight, {rounds}"


def row(name: str, runs: list[dict]) -> str:
    median = sorted(runs, key=lambda r: r["wall"])[len(runs) // 2]
    walls = ", ".join(f"{r['wall']:.0f}" for r in runs)
    best = ", ".join(sorted({f"{r['best']:.1f}" for r in runs}))
    return (
        f"| {name} | {median['trials']} | {median['wall']:.0f} | {walls} | {median['search']:.0f} "
        f"| {median['busy']:.0f} | {median['busy'] / (median['wall'] * SLOTS):.0%} "
        f"| {median['busy'] / (median['search'] * SLOTS):.0%} | {best} |"
    )


def main() -> None:
    global SLOTS, TRIALS, EXECUTOR
    args = sys.argv[1:]
    default = "1x8,8x1,16x1,32x1"
    if "--slurm" in args:
        SLOTS, TRIALS, EXECUTOR, default = SLURM_SLOTS, SLURM_TRIALS, SLURM, "1x2,8x1"
    given = args[args.index("--variants") + 1] if "--variants" in args else default
    chosen = [tuple(int(n) for n in v.split("x")) for v in given.split(",")]
    print("| rounds | trials | sweep wall, median of 3 (s) | runs (s) | search wall (s) | replays, sum (s) "
          "| utilisation, sweep | utilisation, search | best score (all runs) |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|")
    for in_flight, per_round in chosen:
        runs = [sweep(config(in_flight, per_round)) for _ in range(RUNS)]
        print(row(name_of(in_flight, per_round), runs), flush=True)
    simulation(chosen)


if __name__ == "__main__":
    main()
