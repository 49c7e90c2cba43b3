"""Finishes with known truth: simulated fresh samples driven through the project's own `run_finish` and `judge`.

A simulation, named so: no replay is involved. Each deployment's score on fresh sample i is

    level x (1 - depth, on the samples where it collapses) + a day effect every deployment shares on sample i
    (the samples are paired) + its own noise (normal, skewed, or heavy-tailed Student t, with its own spread),

and it misses the SLA, or hits the replay's time limit, on a given share of samples. Which samples collapse, miss or
time out is drawn per deployment and per sample, from a seed of the run. The truth of every statistic is then known:
the mean's exactly (level x (1 - share x depth)), a percentile's where the noise is shared-shape and nothing collapses
(the gap of two levels). `wrong_claims` checks each verdict of a finish against it.

Used by bench/decision_errors.py (the table in docs/benchmarks/finish.md) and by tests/test_finish_claims.py (the
issue's acceptance counts at the defaults).
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

import numpy as np

from spica_lib.config import SmartSearchConfig
from spica_lib.facts.parallel import ParallelShape, ReplicaConfig
from spica_lib.results.confidence import FinishVerdict, judge
from spica_lib.results.finish import SAMPLE_SEPARATOR, FinishResult
from spica_lib.results.sequential import run_finish
from spica_lib.trial.evaluate import prepare_trial
from spica_lib.trial.spec import TrialResult

BEST = 500.0
DAY_SD, OWN_SD = 20.0, 12.0
MARGIN = 0.05


@dataclass(frozen=True)
class Simulated:
    """One deployment's truth."""

    key: str
    level: float
    gpus: int = 4
    own_sd: float = OWN_SD
    collapse_share: float = 0.0  # share of samples on which it loses `collapse_depth` of its level
    collapse_depth: float = 0.0
    miss_share: float = 0.0  # share of samples on which it misses the SLA
    time_limit_share: float = 0.0  # share of samples whose replay hits the time limit
    twin_of: str | None = None  # replays to the same numbers as this one, up to float noise

    def true_mean(self) -> float:
        return self.level * (1 - self.collapse_share * self.collapse_depth)


def config(robustness: str = "mean", finish_max_samples: int | None = None, **goal) -> SmartSearchConfig:
    """The defaults of a sweep (4 to 16 samples, a 5 % margin, a 10 % rare-event share), the statistic given."""
    sweep = {"finish_max_samples": finish_max_samples} if finish_max_samples else {}
    return SmartSearchConfig.from_mapping({
        "search_space": {"model_name": "Qwen/Qwen3-32B", "hardware_sku": "h200_sxm"},
        "workload": {"isl": 1024, "osl": 128, "request_rate": 4.0, "num_request_ratio": 10},
        "goal": {"target": "throughput", "robustness": robustness, **goal},
        "sweep": sweep,
    })  # fmt: skip


def top_of(cfg: SmartSearchConfig, deployments: list[Simulated]) -> dict:
    """Real trial specs, one per simulated deployment (their content does not matter to the finish's decisions)."""
    out = {}
    for d in deployments:
        selection = {"deployment_mode": "agg", "backend": "vllm", "router_mode": "round_robin",
                     "planner_scaling_policy": "disabled", "agg_max_num_batched_tokens": 8192, "agg_max_num_seqs": 256}  # fmt: skip
        spec = prepare_trial(
            cfg, selection, ReplicaConfig(shape=ParallelShape(tp=1), replicas=d.gpus), backend_version="0.24.0"
        )
        out[d.key] = (spec, TrialResult(status="feasible", score=BEST, used_gpus=d.gpus))
    return out


def noise_draw(rng: np.random.Generator, noise: str, sd: float) -> float:
    """Own noise of mean 0: normal; skewed (a long lower tail, a bad minute); or Student t with 2 or 3 degrees of
    freedom (heavy tails; t2 has no variance at all), each scaled to the same spread as the normal's middle."""
    if noise == "skewed":
        return float(sd * (2.0 - rng.gamma(4.0, 0.5)))
    if noise.startswith("t"):
        return float(sd * rng.standard_t(int(noise[1:])))
    return float(rng.normal(0, sd))


def simulated_replayer(deployments: list[Simulated], seed: int, noise: str):
    """A replayer from known truth (a simulation, not a replay): scores by `run_finish`'s sample names."""
    by_key = {d.key: d for d in deployments}
    day = np.random.default_rng([seed, 1]).normal(0, DAY_SD, size=256)

    def replay(specs):
        out = {}
        for name in specs:
            key, _, index = name.partition(SAMPLE_SEPARATOR)
            d = by_key[key]
            source = d.twin_of or d.key
            rng = np.random.default_rng([seed, zlib.crc32(source.encode()), int(index)])
            own = noise_draw(rng, noise, d.own_sd)
            collapsed, missed, limited = rng.random(3) < (d.collapse_share, d.miss_share, d.time_limit_share)
            score = d.level * (1 - d.collapse_depth if collapsed else 1) + day[int(index)] + own
            score *= 1 + 1e-15 if d.twin_of else 1  # Dynamo's summation order, nothing more
            status = "timed_out" if limited else "infeasible" if missed else "feasible"
            out[name] = TrialResult(
                status=status, score=score if status == "feasible" else None, used_gpus=d.gpus,
                reason=None if status == "feasible" else f"simulated {status}",
            )  # fmt: skip
        return out

    return replay


def finish_once(cfg: SmartSearchConfig, top: dict, deployments: list[Simulated], seed: int, noise: str):
    """One simulated finish through the sweep's own sequential loop, and its verdict."""
    finish = run_finish(cfg, top, simulated_replayer(deployments, seed, noise))
    return finish, judge(finish)


def true_statistic(d: Simulated, robustness: str) -> float:
    """The truth a verdict is checked against: the mean's exactly; a percentile's gap is its levels' gap where
    nothing collapses and the noise has one shape and spread (the cells that judge p10 are built so)."""
    return d.true_mean() if robustness == "mean" else d.level


def wrong_claims(deployments: list[Simulated], finish: FinishResult, verdict: FinishVerdict) -> dict[str, bool]:
    """Each kind of claim the finish made, and whether one of that kind was wrong:

    - `equivalent`: called within the margin of the best while truly beyond it;
    - `behind`: called behind the best while truly a best;
    - `unsaid_miss`: recommended with an SLA miss on a compared sample the sentence does not say;
    - `missed_on_time_limit`: called `missed` although its only unfinished samples hit the time limit;
    - `any`: any of them (the family-wise error)."""
    truth = {d.key: true_statistic(d, finish.robustness) for d in deployments}
    best = max(truth.values())
    by_key = {d.key: d for d in deployments}
    equivalent = any(r.equivalent and best - truth[r.key] > MARGIN * best * (1 + 1e-9) for r in verdict.ranks)
    behind = any(r.verdict == "behind" and truth[r.key] >= best * (1 - 1e-12) for r in verdict.ranks)
    first = verdict.ranks[0]
    unsaid = first.compared_misses > 0 and "missed the SLA" not in verdict.sentence
    on_time_limit = any(r.verdict == "missed" and by_key[r.key].miss_share == 0 for r in verdict.ranks)
    claims = {"equivalent": equivalent, "behind": behind, "unsaid_miss": unsaid, "missed_on_time_limit": on_time_limit}
    return {**claims, "any": any(claims.values())}


def clopper_pearson_upper(wrong: int, runs: int, level: float = 0.95) -> float:
    """The exact one-sided upper bound on a rate of `wrong` in `runs`."""
    from scipy.stats import beta

    return 1.0 if wrong >= runs else float(beta.ppf(level, wrong + 1, runs - wrong))
