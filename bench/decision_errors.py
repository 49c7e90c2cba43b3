"""Benchmark: how often the finish's verdicts are wrong, against known truth.

Results: docs/benchmarks/finish.md, "Wrong verdicts".

Simulated finishes: each deployment's score on fresh sample i is its true level + a day effect every deployment
shares on that sample (the samples are paired) + its own noise, normal or skewed (a gamma, mean 0). The true
difference of two deployments is then the difference of their levels for the mean and for any percentile, so
the truth is known for every statistic. The finish runs as the sweep runs it: `run_finish` (results/sequential.py)
at the defaults (4 deployments, 4 to 16 samples, a 5 % margin, 95 % for the family), with a replayer that draws
these scores (a simulation, named so: no replay is involved); its last verdict is `judge`'s. Deployments shown
behind stop while the others go on, and a decided but imprecise finish gives the recommendation samples of its
own: unequal counts. "One look" judges the first 4 samples of every deployment (equal counts).

Scenarios, each with its wrong verdicts (the nominal rate of each is 2.5 %, half the family's 5 %):
  beyond   the cheaper deployment (2 GPUs) is truly 5.2 % behind the best (the margin is 5 %), two more 10 % behind:
           wrong = the cheaper one called "equivalent" (and so recommended);
  equal    four deployments truly equal: wrong = any of them called "behind" (each is a best);
  twins    two deployments that replay to the same numbers up to float noise (x (1 + 1e-15)), the cheaper one
           5.2 % behind: wrong = a twin called "behind", or the cheaper one called "equivalent".

Run: .venv/bin/python bench/decision_errors.py [--runs 1000] [--statistics mean,p10,worst]
"""

from __future__ import annotations

import argparse
import sys
import time
import zlib
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from spica_lib.config import SmartSearchConfig  # noqa: E402
from spica_lib.facts.parallel import ParallelShape, ReplicaConfig  # noqa: E402
from spica_lib.results.confidence import judge  # noqa: E402
from spica_lib.results.finish import SAMPLE_SEPARATOR, FinishResult  # noqa: E402
from spica_lib.results.sequential import run_finish  # noqa: E402
from spica_lib.trial.evaluate import prepare_trial  # noqa: E402
from spica_lib.trial.spec import TrialResult  # noqa: E402

BEST = 500.0
SCENARIOS = {  # name -> (key, true level, GPUs) per deployment
    "beyond": [("best", BEST, 4), ("cheaper", BEST * (1 - 0.052), 2), ("far1", BEST * 0.9, 4), ("far2", BEST * 0.9, 4)],
    "equal": [(f"d{i}", BEST, 4) for i in range(4)],
    "twins": [("twin", BEST, 4), ("twin2", BEST, 4), ("cheaper", BEST * (1 - 0.052), 2), ("far", BEST * 0.9, 4)],
}
DAY_SD, OWN_SD = 20.0, 12.0
NOMINAL = 0.025


def config(robustness: str) -> SmartSearchConfig:
    return SmartSearchConfig.from_mapping({
        "search_space": {"model_name": "Qwen/Qwen3-32B", "hardware_sku": "h200_sxm"},
        "workload": {"isl": 1024, "osl": 128, "request_rate": 4.0, "num_request_ratio": 10},
        "goal": {"target": "throughput", "robustness": robustness},
    })  # fmt: skip


def top_of(cfg: SmartSearchConfig, deployments) -> dict:
    """Real trial specs, one per simulated deployment (their content does not matter to the finish's decisions)."""
    out = {}
    for key, _, gpus in deployments:
        selection = {"deployment_mode": "agg", "backend": "vllm", "router_mode": "round_robin",
                     "planner_scaling_policy": "disabled", "agg_max_num_batched_tokens": 8192, "agg_max_num_seqs": 256}  # fmt: skip
        spec = prepare_trial(
            cfg, selection, ReplicaConfig(shape=ParallelShape(tp=1), replicas=gpus), backend_version="0.24.0"
        )
        out[key] = (spec, TrialResult(status="feasible", score=BEST, used_gpus=gpus))
    return out


def simulated_replayer(deployments, run: int, skewed: bool):
    """Scores from known truth: level + the sample's shared day effect + own noise (a simulation, not a replay)."""
    level = {key: mu for key, mu, _ in deployments}
    day = np.random.default_rng([run, 1]).normal(0, DAY_SD, size=64)

    def noise(key: str, index: int) -> float:
        source = "twin" if key.startswith("twin") else key  # twins replay to the same numbers
        rng = np.random.default_rng([run, zlib.crc32(source.encode()), index])
        if skewed:  # a long lower tail (a bad minute), mean 0, the same spread
            return float(OWN_SD * (2.0 - rng.gamma(4.0, 0.5)))
        return float(rng.normal(0, OWN_SD))

    def replay(specs):
        out = {}
        for name in specs:
            key, _, index = name.partition(SAMPLE_SEPARATOR)
            score = level[key] + day[int(index)] + noise(key, int(index))
            score *= 1 + 1e-15 if key == "twin2" else 1  # Dynamo's summation order, nothing more
            out[name] = TrialResult(
                status="feasible", score=score, used_gpus=dict((k, g) for k, _, g in deployments)[key]
            )
        return out

    return replay


def wrong(scenario: str, verdict) -> bool:
    ranks = {r.key: r for r in verdict.ranks}
    if scenario == "beyond":
        return ranks["cheaper"].verdict == "equivalent"
    if scenario == "equal":
        return any(r.verdict == "behind" for r in verdict.ranks)
    return ranks["cheaper"].verdict == "equivalent" or any(ranks[k].verdict == "behind" for k in ("twin", "twin2"))


def one_look(finish: FinishResult) -> FinishResult:
    first = finish.first_samples
    kept = [d.model_copy(update={"samples": d.samples[:first]}) for d in finish.deployments]
    return finish.model_copy(update={"deployments": kept})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--statistics", default="mean,p10,worst")
    args = parser.parse_args()
    started = time.perf_counter()
    print(f"{args.runs} simulated finishes per cell; nominal rate of each wrong verdict {NOMINAL:.1%}; "
          f"binomial sd at the nominal rate {np.sqrt(NOMINAL * (1 - NOMINAL) / args.runs):.2%}")  # fmt: skip
    print(
        "| statistic | noise | scenario | wrong, sequential (unequal counts) | wrong, one look (equal counts) "
        "| samples per deployment, fewest-most | recommended the true best (or a twin) |"
    )
    print("|---|---|---|---:|---:|---|---:|")
    for robustness in args.statistics.split(","):
        cfg = config(robustness)
        for skewed in (False, True):
            for scenario, deployments in SCENARIOS.items():
                top = top_of(cfg, deployments)
                sequential = look = right = 0
                fewest, most = 99, 0
                for run in range(args.runs):
                    finish = run_finish(cfg, top, simulated_replayer(deployments, run, skewed))
                    verdict = judge(finish)
                    sequential += wrong(scenario, verdict)
                    look += wrong(scenario, judge(one_look(finish)))
                    low, high = finish.samples_used
                    fewest, most = min(fewest, low), max(most, high)
                    truth = max(mu for _, mu, _ in deployments)
                    right += next(mu for key, mu, _ in deployments if key == verdict.ranks[0].key) == truth
                rate, rate_look = sequential / args.runs, look / args.runs
                print(f"| {robustness} | {'skewed' if skewed else 'normal'} | {scenario} | {rate:.1%} | {rate_look:.1%} "
                      f"| {fewest}-{most} | {right / args.runs:.0%} |", flush=True)  # fmt: skip
    print(f"({time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()
