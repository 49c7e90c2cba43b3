"""Scale on paper: the wall of a 256-trial study on a 500k-request trace on 32 single-CPU SLURM slots.

Worked out, not run. Inputs (each measured by the script named in docs/benchmarks/scale.md):
- `--replay-seconds`: one replay of the 500k-request day trace (bench/day_trace.py), taken as the
  median replay of a trial;
- `--overhead-seconds`: what SLURM adds per trial (bench/slurm_overhead.py);
- the spread of replay times: NVIDIA's published p90 / p50 of its campaign's replays (650 / 230).
Each trial holds its slot for its replay plus the overhead. The schedule is simulated like
bench/slot_utilisation.py's, over 1,000 draws of the 256 replay times: barrier rounds of 32 and
rounds in flight with one trial per round, and the ideal that starts a trial whenever a slot frees.
Printed per schedule: the median wall, its ratio to the replays' own Σ ÷ 32 (goal ≤ 1.15), and
NVIDIA's published 4.0–11.4 h (three studies of 256 suggestions on 32 workers) next to it.

Run: .venv/bin/python bench/scale_on_paper.py --replay-seconds S --overhead-seconds O
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from slot_utilisation import greedy, simulated  # noqa: E402

TRIALS, SLOTS, SPREAD = 256, 32, 650 / 230


def main() -> None:
    args = sys.argv[1:]
    replay = float(args[args.index("--replay-seconds") + 1])
    overhead = float(args[args.index("--overhead-seconds") + 1])
    rng = np.random.default_rng(0)
    sigma = math.log(SPREAD) / 1.2816
    draws = [rng.lognormal(math.log(replay), sigma, TRIALS) for _ in range(1000)]
    print(f"256 trials on 32 slots; median replay {replay:.0f} s (p90 {replay * SPREAD:.0f} s), "
          f"{overhead:.1f} s added per trial\n")  # fmt: skip
    print("| schedule | wall, median (h) | wall ÷ (Σ replays ÷ 32) |\n|---|---|---|")
    schedules = [("barrier, 8 rounds x 32", lambda d: simulated(1, SLOTS, d, SLOTS))]
    schedules += [(f"{w} in flight, 256 x 1", lambda d, w=w: simulated(w, 1, d, SLOTS)) for w in (64, 128, 256)]
    schedules += [("ideal: a new trial whenever a slot frees", lambda d: greedy(d, SLOTS))]
    for name, schedule in schedules:
        walls, ratios = [], []
        for replays in draws:
            held = list(replays + overhead)
            wall = sum(held) / (schedule(held) * SLOTS)
            walls.append(wall)
            ratios.append(wall / (replays.sum() / SLOTS))
        print(f"| {name} | {np.median(walls) / 3600:.2f} | {np.median(ratios):.2f} |")
    print("| NVIDIA's published campaign (in-memory, 32 workers) | 4.0, 11.4, 5.8 | |")


if __name__ == "__main__":
    main()
