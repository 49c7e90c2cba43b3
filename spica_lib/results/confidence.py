"""Ranking the finished top by its fresh samples: statistic, interval to the leader, ties, probability of being best.

Each finished deployment has a score on the same fresh samples (results/finish.py), so two of them
are compared sample by sample. The statistic is `goal.robustness`: the mean (default), the 10th
percentile or the worst sample.

- The **leader** has the best statistic among the deployments that held on every sample (feasible
  on each); one that missed on some sample ranks after all that held.
- **Behind the leader**: the leader's statistic minus this one's, in the goal's unit (positive:
  worse), with a 95 % interval from the paired samples: Student's t on the per-sample differences for
  the mean, a paired bootstrap of the statistic's difference for p10 and worst.
- **Tied**: the interval contains 0, or there are too few samples for one. Two deployments that replay
  exactly on traffic that does not change (round robin on a trace's held-out part) differ by a fact:
  their interval is a point, tied only when they score the same. The leader is in its own
  tie set. Among the tie set the **recommendation** is the one with the fewest GPUs, then the lowest
  cost (US$ per million tokens when priced, else average GPUs), then the best statistic.
- **P(best)**: how often each has the best statistic when the samples are drawn again with
  replacement (a paired bootstrap, fixed seed: the same files give the same numbers).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict

from spica_lib.results.finish import FinishedDeployment, FinishResult

CONFIDENCE = 0.95
BOOTSTRAP_DRAWS = 2000
BOOTSTRAP_SEED = 0


class FinishedRank(BaseModel):
    """A finished deployment's standing among the finished top."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    key: str
    search_score: float  # on the search's own sample, for comparison
    statistic: float | None  # goal.robustness of its scored samples (None: it scored on none)
    mean: float | None
    sd: float | None
    worst: float | None
    scored: int  # samples it was feasible on
    samples: int
    held: bool
    behind: float | None = None  # the leader's statistic minus this one's (0 for the leader)
    behind_low: float | None = None  # its 95 % interval (None: too few paired samples)
    behind_high: float | None = None
    tied: bool = False  # cannot be told apart from the leader
    p_best: float = 0.0
    leader: bool = False
    recommended: bool = False
    failed_samples: list[str] = []


class FinishVerdict(BaseModel):
    """The finished top in its final order (the recommendation first) and the sentence that explains it."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    robustness: str
    samples: int
    kind: str
    ranks: list[FinishedRank]
    sentence: str
    # Kendall's tau between the search's order of the finished top and their order on fresh samples
    # (1: the same order; None with fewer than 2, or when either order is all ties).
    kendall_tau: float | None = None
    # Whether the recommendation met the SLA on every fresh sample (None without an SLA).
    recommended_meets_sla: bool | None = None

    @property
    def recommended(self) -> FinishedRank | None:
        return self.ranks[0] if self.ranks else None


def statistic(scores: Sequence[float], robustness: str) -> float:
    values = np.asarray(scores, dtype=float)
    if robustness == "worst":
        return float(values.min())
    if robustness == "p10":
        return float(np.percentile(values, 10))
    return float(values.mean())


def judge(finish: FinishResult) -> FinishVerdict:
    """The finished top ranked by its fresh samples (see the module docstring)."""
    deployments = [d for d in finish.deployments if d.scores]
    unscored = [d for d in finish.deployments if not d.scores]
    if not deployments:
        ranks = [_rank(d, finish.robustness) for d in unscored]
        return FinishVerdict(
            robustness=finish.robustness, samples=finish.samples, kind=finish.kind or "", ranks=ranks,
            sentence=f"No top deployment was feasible on any of the {finish.samples} fresh samples.",
        )  # fmt: skip
    held = [d for d in deployments if d.held] or deployments
    stat = {d.key: statistic(d.scores, finish.robustness) for d in deployments}
    leader = max(held, key=lambda d: (stat[d.key], -d.used_gpus))
    ranks = {d.key: _rank(d, finish.robustness) for d in deployments}
    for d in held:
        ranks[d.key] = _against(ranks[d.key], d, leader, finish.robustness)
    for key, p in _p_best(held, finish.robustness).items():
        ranks[key].p_best = p
    tie_set = [d for d in held if ranks[d.key].tied]
    chosen = min(tie_set, key=lambda d: (d.used_gpus, d.cost, -stat[d.key]))
    ranks[chosen.key].recommended = True
    rest = sorted(
        (d for d in held if d.key != chosen.key), key=lambda d: (-stat[d.key], d.used_gpus)
    )  # then those that missed on some sample
    missed = sorted((d for d in deployments if d not in held), key=lambda d: -stat[d.key])
    order = [ranks[d.key] for d in [chosen, *rest, *missed]] + [_rank(d, finish.robustness) for d in unscored]
    return FinishVerdict(
        robustness=finish.robustness,
        samples=finish.samples,
        kind=finish.kind or "",
        ranks=order,
        sentence=_sentence(order, finish, {d.key: d for d in finish.deployments}),
        kendall_tau=_kendall_tau(deployments, stat),
        recommended_meets_sla=_meets_sla(chosen),
    )


def _kendall_tau(deployments: list[FinishedDeployment], stat: dict[str, float]) -> float | None:
    """How well the search's order of the finished top held on fresh samples."""
    if len(deployments) < 2:
        return None
    from scipy.stats import kendalltau

    tau = kendalltau([d.search_score for d in deployments], [stat[d.key] for d in deployments]).statistic
    return None if tau is None or math.isnan(tau) else float(tau)


def _meets_sla(d: FinishedDeployment) -> bool | None:
    misses = [s.sla_miss for s in d.samples if s.sla_miss is not None]
    if not misses:
        return None
    return d.held and max(misses) <= 1.0


def _rank(d: FinishedDeployment, robustness: str) -> FinishedRank:
    scores = d.scores
    return FinishedRank(
        key=d.key,
        search_score=d.search_score,
        statistic=statistic(scores, robustness) if scores else None,
        mean=float(np.mean(scores)) if scores else None,
        sd=float(np.std(scores, ddof=1)) if len(scores) > 1 else None,
        worst=min(scores) if scores else None,
        scored=len(scores),
        samples=len(d.samples),
        held=d.held,
        failed_samples=d.failed_samples,
    )


def _paired(a: FinishedDeployment, b: FinishedDeployment) -> tuple[np.ndarray, np.ndarray]:
    """Scores of a and b on the samples both were feasible on, in sample order."""
    mine = {s.index: s.score for s in a.samples if s.status == "feasible" and s.score is not None}
    theirs = {s.index: s.score for s in b.samples if s.status == "feasible" and s.score is not None}
    both = sorted(set(mine) & set(theirs))
    return np.array([mine[i] for i in both], dtype=float), np.array([theirs[i] for i in both], dtype=float)


def _against(rank: FinishedRank, d: FinishedDeployment, leader: FinishedDeployment, robustness: str) -> FinishedRank:
    if d.key == leader.key:
        return rank.model_copy(update={"behind": 0.0, "behind_low": 0.0, "behind_high": 0.0, "tied": True, "leader": True})
    ours, theirs = _paired(leader, d)
    behind = statistic(leader.scores, robustness) - statistic(d.scores, robustness)
    # Two exact replays of the same traffic differ by exactly this much: an interval of one point.
    interval = (behind, behind) if leader.exact and d.exact else _interval(ours, theirs, robustness)
    tied = interval is None or interval[0] <= 0.0 <= interval[1]
    low, high = interval if interval is not None else (None, None)
    return rank.model_copy(update={"behind": behind, "behind_low": low, "behind_high": high, "tied": tied})


def _interval(leader: np.ndarray, other: np.ndarray, robustness: str) -> tuple[float, float] | None:
    """95 % interval of leader − other on paired samples; None with fewer than 2 pairs."""
    n = len(leader)
    if n < 2:
        return None
    if robustness == "mean":
        from scipy.stats import t

        differences = leader - other
        half = float(t.ppf(0.5 + CONFIDENCE / 2, n - 1)) * float(differences.std(ddof=1)) / math.sqrt(n)
        centre = float(differences.mean())
        return centre - half, centre + half
    draws = _draws(n)
    gaps = [statistic(leader[i], robustness) - statistic(other[i], robustness) for i in draws]
    tail = (1 - CONFIDENCE) / 2 * 100
    return float(np.percentile(gaps, tail)), float(np.percentile(gaps, 100 - tail))


def _draws(n: int) -> np.ndarray:
    return np.random.default_rng(BOOTSTRAP_SEED).integers(0, n, size=(BOOTSTRAP_DRAWS, n))


def _p_best(held: list[FinishedDeployment], robustness: str) -> dict[str, float]:
    """Share of paired bootstrap draws of the samples in which each has the best statistic (fewer GPUs on ties)."""
    indices = sorted(set.intersection(*({s.index for s in d.samples if s.status == "feasible"} for d in held)))
    if not indices:
        return {}
    table = np.array([[next(s.score for s in d.samples if s.index == i) for i in indices] for d in held], dtype=float)
    wins = dict.fromkeys((d.key for d in held), 0)
    for draw in _draws(len(indices)):
        values = [statistic(row[draw], robustness) for row in table]
        best = max(range(len(held)), key=lambda j: (values[j], -held[j].used_gpus))
        wins[held[best].key] += 1
    return {key: count / BOOTSTRAP_DRAWS for key, count in wins.items()}


def _sentence(order: list[FinishedRank], finish: FinishResult, deployments: dict[str, FinishedDeployment]) -> str:
    plural = "s" if finish.samples != 1 else ""
    samples = {
        "repeat": f"{finish.samples} repeated replay{plural}",
        "holdout": f"{finish.samples} replay{plural} of the held-out traffic",
    }.get(finish.kind or "", f"{finish.samples} fresh sample{plural}")
    tied = [position for position, r in enumerate(order, start=1) if r.tied]
    if len(tied) <= 1:
        return f"#1 is ahead of every other finished deployment on {samples} (each 95 % interval excludes 0)."
    names = ", ".join(f"#{p}" for p in tied[:-1]) + f" and #{tied[-1]}"
    first, leader = order[0], next(r for r in order if r.leader)
    if first.leader:
        why = "it is also the leader"
        if all(deployments[first.key].used_gpus <= deployments[order[p - 1].key].used_gpus for p in tied):
            why = "it has the best score and no more GPUs than the others"
    else:
        fewer = deployments[leader.key].used_gpus - deployments[first.key].used_gpus
        position = order.index(leader) + 1
        why = (
            f"it uses {fewer} GPU{'s' if fewer != 1 else ''} fewer than #{position}, the best on these samples"
            if fewer > 0
            else f"it costs less than #{position}, the best on these samples"
        )
    return f"{names} cannot be told apart on {samples}; #1 is recommended: {why}."
