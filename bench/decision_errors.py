"""Benchmark: how often the finish's claims are wrong, against known truth, on samples that are not normal.

Results: docs/benchmarks/finish.md, "Wrong verdicts".

Simulated finishes (bench/finish_simulation.py: a simulation, named so, no replay): each deployment's score on a
fresh sample is its level (lowered on the samples where it collapses) + a day effect every deployment shares on that
sample + its own noise, and it misses the SLA or hits the replay's time limit on a given share of samples. The finish
runs as a sweep runs it: `run_finish` (results/sequential.py) and `judge`, at the defaults (4 to 16 samples, a 5 %
margin, a 10 % rare-event share, 95 % for the family), so deployments shown behind stop while others go on, the
rare-event check draws past the cap for the deployments an equivalence would favour, and the recommendation gets
samples of its own. The p10 cells run with `finish_max_samples: 128`, so that claims about it are made at all.

Scenarios (the cheaper deployment uses 2 GPUs, the others 4):
  beyond     the cheaper one truly 5.2 % behind the best (the margin is 5 %); with K = 4, two more 10 % behind;
  equal      K deployments truly equal;
  twins      two deployments that replay to the same numbers up to 1e-15 of themselves, the cheaper 5.2 % behind;
  collapse   the cheaper one equal to the best on 90 % of samples and 60 % lower on 10 % (truly 6 % behind);
  late-miss  the cheaper one equal to the best but missing the SLA on 15 % of samples, and one 20 % behind (shown
             behind at the first look, so only the first look's samples are every deployment's);
  time-limit the cheaper one equal to the best, its replay hitting the time limit on 15 % of samples;
  unequal    "beyond" and "equal" with the deployments' own spreads unequal (the cheaper one's 3x; 6 to 36).
Noise: normal; skewed (a gamma's long lower tail); Student t with 3 and 2 degrees of freedom (t2: no variance).

Claims checked (bench/finish_simulation.py `wrong_claims`), each with its rate and the rate's exact
(Clopper-Pearson) upper 95 % bound over the cell's runs:
  equivalent  a deployment truly beyond the margin called equivalent (nominal 2.5 %: the family's equivalence side,
              its bounds and its rare-event check together);
  behind      a true best called behind (nominal 2.5 %);
  unsaid miss the recommendation missed the SLA on a compared sample and the sentence does not say so (nominal 0);
  time limit  a deployment that never missed the SLA, only hit the time limit, called `missed` (nominal 0);
  family      any wrong claim in the finish (nominal 5 %).
"Finishes with a claim": the share whose verdicts call at least one deployment equivalent or behind (a cell where
none is made cannot show a wrong one).
Every cell runs on its own seeds (the cell's name and the run number).

Run: .venv/bin/python bench/decision_errors.py [--runs 1000] [--cells mean,p10] [--workers 2]
"""

from __future__ import annotations

import argparse
import sys
import time
import zlib
from multiprocessing import Pool
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from finish_simulation import BEST, OWN_SD, Simulated, clopper_pearson_upper, config, finish_once, top_of, wrong_claims  # noqa: E402

NOMINAL = {"equivalent": 0.025, "behind": 0.025, "unsaid_miss": 0.0, "missed_on_time_limit": 0.0, "any": 0.05}
BEHIND = BEST * (1 - 0.052)


def scenarios() -> dict[str, list[Simulated]]:
    far = [Simulated("far1", BEST * 0.9), Simulated("far2", BEST * 0.9)]
    return {
        "beyond K=2": [Simulated("best", BEST), Simulated("cheaper", BEHIND, 2)],
        "beyond K=4": [Simulated("best", BEST), Simulated("cheaper", BEHIND, 2), *far],
        "equal K=2": [Simulated("d0", BEST), Simulated("d1", BEST, 2)],
        "equal K=4": [Simulated(f"d{i}", BEST, 4 - i % 2) for i in range(4)],
        "twins K=4": [Simulated("twin", BEST), Simulated("twin2", BEST, twin_of="twin"),
                      Simulated("cheaper", BEHIND, 2), Simulated("far", BEST * 0.9)],
        "collapse K=2": [Simulated("best", BEST), Simulated("cheaper", BEST, 2, collapse_share=0.1, collapse_depth=0.6)],
        "collapse K=4": [Simulated("best", BEST), Simulated("cheaper", BEST, 2, collapse_share=0.1, collapse_depth=0.6),
                         *far],
        "late-miss K=3": [Simulated("best", BEST), Simulated("cheaper", BEST, 2, miss_share=0.15),
                          Simulated("far", BEST * 0.8)],
        "time-limit K=3": [Simulated("best", BEST), Simulated("cheaper", BEST, 2, time_limit_share=0.15),
                           Simulated("far", BEST * 0.8)],
        "unequal beyond K=2": [Simulated("best", BEST), Simulated("cheaper", BEHIND, 2, own_sd=3 * OWN_SD)],
        "unequal beyond K=4": [Simulated("best", BEST, own_sd=OWN_SD / 2), Simulated("cheaper", BEHIND, 2, own_sd=3 * OWN_SD),
                               Simulated("far1", BEST * 0.9, own_sd=2 * OWN_SD), Simulated("far2", BEST * 0.9)],
        "unequal equal K=4": [Simulated(f"d{i}", BEST, 4 - i % 2, own_sd=sd) for i, sd in enumerate((6.0, 12.0, 24.0, 36.0))],
    }  # fmt: skip


# p10's truth is its levels' gap only where nothing collapses and every deployment's noise has one shape and spread.
P10_SCENARIOS = ("beyond K=2", "beyond K=4", "equal K=2", "equal K=4")
CELLS = {
    "mean": [(s, noise) for noise in ("normal", "skewed", "t3", "t2") for s in scenarios()],
    "p10": [(s, noise) for noise in ("normal", "skewed") for s in P10_SCENARIOS],
}


def run_cell(job: tuple[str, str, str, int]) -> dict:
    robustness, scenario, noise, runs = job
    deployments = scenarios()[scenario]
    cfg = config(robustness, finish_max_samples=128 if robustness == "p10" else None)
    top = top_of(cfg, deployments)
    cell_seed = zlib.crc32(f"{robustness}|{scenario}|{noise}".encode()) * 100_003
    wrong = dict.fromkeys(NOMINAL, 0)
    fewest, most, right, claimed = 10**9, 0, 0, 0
    truth = {d.key: d.true_mean() if robustness == "mean" else d.level for d in deployments}
    best = max(truth.values())
    started = time.perf_counter()
    for run in range(runs):
        finish, verdict = finish_once(cfg, top, deployments, cell_seed + run, noise)
        for claim, bad in wrong_claims(deployments, finish, verdict).items():
            wrong[claim] += bad
        low, high = finish.samples_used
        fewest, most = min(fewest, low), max(most, high)
        right += truth[verdict.ranks[0].key] >= best * (1 - 1e-12)
        claimed += any(r.verdict in ("equivalent", "behind") for r in verdict.ranks)
    return {"robustness": robustness, "scenario": scenario, "noise": noise, "runs": runs, "wrong": wrong,
            "samples": f"{fewest}-{most}", "right": right / runs, "claimed": claimed / runs,
            "seconds": time.perf_counter() - started}  # fmt: skip


def cell_text(count: int, runs: int, nominal: float) -> str:
    upper = clopper_pearson_upper(count, runs)
    mark = "" if upper <= nominal or (nominal == 0 and count == 0) else " **over**"
    return f"{100 * count / runs:.1f} % (≤ {100 * upper:.1f} %){mark}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--cells", default="mean,p10")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    started = time.perf_counter()
    jobs = [(robustness, s, noise, args.runs) for robustness in args.cells.split(",") for s, noise in CELLS[robustness]]
    print(f"{args.runs} simulated finishes per cell, each cell on its own seeds; each rate with its exact "
          "(Clopper-Pearson) upper 95 % bound; nominal: equivalent 2.5 %, behind 2.5 %, unsaid miss 0, "
          "time limit called missed 0, family 5 %")  # fmt: skip
    print("| statistic | noise | scenario | wrong equivalent | wrong behind | unsaid SLA miss | time limit called missed "
          "| family-wise | finishes with a claim | samples per deployment | recommended the true best |")  # fmt: skip
    print("|---|---|---|---:|---:|---:|---:|---:|---:|---|---:|")
    over = 0
    with Pool(args.workers) as pool:
        for cell in pool.imap(run_cell, jobs):
            runs, wrong = cell["runs"], cell["wrong"]
            texts = [cell_text(wrong[claim], runs, NOMINAL[claim]) for claim in NOMINAL]
            over += sum("**over**" in text for text in texts)
            print(f"| {cell['robustness']} | {cell['noise']} | {cell['scenario']} | {' | '.join(texts)} "
                  f"| {cell['claimed']:.0%} | {cell['samples']} | {cell['right']:.0%} |", flush=True)  # fmt: skip
    print(f"{len(jobs)} cells, {over} bound(s) over the nominal rate ({time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()
