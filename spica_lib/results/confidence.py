"""Which finished deployment to recommend, and what its fresh samples show, as claims made for the family.

Each finished deployment has scores on the same fresh samples (results/finish.py), so two of them
are compared sample by sample. The statistic is `goal.robustness`: the mean (default), the 10th
percentile or the worst sample.

1. **Held first.** The contenders are the deployments that met the SLA on the largest share of their
   samples (every sample, when any did); the others rank after them, by that share, then by the
   statistic. A recommendation that missed a sample is said to have missed it.
2. **Simultaneous bounds.** For each contender i, bounds on how far it is behind the best of the
   others, max_j mu_j - mu_i: from the paired comparison with each other contender j, one-sided
   bounds on stat_j - stat_i, and the bounds are [max_j lower_ij, max_j upper_ij]. The upper bounds
   are Hsu's multiple comparisons with the best (they need only the K - 1 comparisons with the true
   best): each at (alpha / 2) / ((K - 1) L). The lower bounds must hold when several deployments
   are equal, so they cover every ordered pair: each at (alpha / 2) / (K (K - 1) L). Bonferroni,
   with L the looks the sequential finish may take (results/sequential.py): every claim below
   holds at 95 % for the whole family, whichever look stopped. Pair bounds: Student's t on the
   per-sample differences for the mean, a paired bootstrap of the statistic's difference for p10
   and worst; two exact deployments (round robin on traffic that does not change) differ by a
   fact, a bound of one point; fewer than 2 paired samples bound nothing.
3. **Verdicts.** A contender is *behind* when its lower bound is above 0 (shown worse than the best;
   `beyond_margin` when it is above the margin too); *equivalent* when its upper bound is at most
   the equivalence margin (`goal.equivalence_margin`, a
   share of the leader's statistic or a value in the goal's unit): shown within the margin of the
   best, whichever that is; otherwise *undecided*. "Not separated" is not equivalence.
4. **The recommendation.** Among the equivalent contenders: the fewest GPUs, then the lowest cost
   (US$ per million tokens when priced, else average GPUs; costs within COST_TOLERANCE of each
   other are equal), then the higher statistic. When none is shown equivalent, the **leader** (the
   best statistic) is recommended, and the sentence says that nothing was shown.
5. **P(best)**: the share of paired bootstrap resamples of the samples in which a deployment has
   the best statistic, a tie split evenly between those that tie (fixed seed: the same files give
   the same numbers).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from spica_lib.results.finish import FinishedDeployment, FinishResult

CONFIDENCE = 0.95  # for the family of claims of one finish
BOOTSTRAP_DRAWS = 4000  # enough draws that a tail of alpha / ((K - 1) L) holds a few dozen of them
BOOTSTRAP_SEED = 0
COST_TOLERANCE = 0.01  # costs within 1 % are equal (average GPUs of 2.9999999999999964 and 3.0 are one cost)
Verdict = Literal["equivalent", "behind", "undecided", "missed", "unscored"]


class FinishedRank(BaseModel):
    """A finished deployment's standing among the finished top."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    key: str
    search_score: float  # on the search's own sample, for comparison
    statistic: float | None  # goal.robustness of its scored samples (None: it scored on none)
    mean: float | None
    sd: float | None
    # The statistic's standard error over its samples (a paired bootstrap for every statistic; 0 for exact replays).
    se: float | None = None
    worst: float | None
    scored: int  # samples it was feasible on
    samples: int  # samples it was given
    held: bool
    behind: float | None = None  # the leader's statistic minus this one's (0 for the leader)
    # Simultaneous 95 % bounds on how far it is behind the best of the others (None: not bounded that way).
    behind_low: float | None = None
    behind_high: float | None = None
    verdict: Verdict = "undecided"
    beyond_margin: bool = False  # shown more than the equivalence margin behind the best
    p_best: float = 0.0
    leader: bool = False
    recommended: bool = False
    failed_samples: list[str] = []
    # Means over its fresh samples: the SLA's worst ratio to its bound, and the sample metrics (results/finish.py).
    sla_miss: float | None = None
    metrics: dict[str, float] = Field(default_factory=dict)

    @property
    def equivalent(self) -> bool:
        return self.verdict == "equivalent"


class FinishVerdict(BaseModel):
    """The finished top in its final order (the recommendation first) and the sentence that explains it."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    robustness: str
    kind: str
    samples_min: int
    samples_max: int
    margin: float | None = None  # the equivalence margin in the goal's unit
    margin_text: str | None = None
    ranks: list[FinishedRank]
    sentence: str
    # Whether more samples could still change the recommendation (an undecided contender it would yield to).
    decided: bool = True
    open_keys: list[str] = Field(default_factory=list)  # the contenders still undecided that could change it
    contender_keys: list[str] = Field(default_factory=list)  # not shown behind: they get the next look's samples
    # Kendall's tau between the search's order of the finished top and their order on fresh samples
    # (1: the same order; None with fewer than 2, or when either order is all ties).
    kendall_tau: float | None = None
    # Whether the recommendation met the SLA on every fresh sample (None without an SLA).
    recommended_meets_sla: bool | None = None

    @property
    def recommended(self) -> FinishedRank | None:
        return self.ranks[0] if self.ranks else None


def statistic(scores: Sequence[float], robustness: str) -> float:
    return float(statistics_along(np.asarray(scores, dtype=float), robustness))


def statistics_along(values: np.ndarray, robustness: str) -> np.ndarray:
    """`goal.robustness` of the samples along the last axis (one value per row of resampled scores)."""
    if robustness == "worst":
        return values.min(axis=-1)
    if robustness == "p10":
        return np.percentile(values, 10, axis=-1)
    return values.mean(axis=-1)


def judge(finish: FinishResult) -> FinishVerdict:
    """The finished top ranked by its fresh samples (see the module docstring)."""
    robustness = finish.robustness
    scored = [d for d in finish.deployments if d.scores]
    unscored = [d for d in finish.deployments if not d.scores]
    low, high = finish.samples_used
    base = {"robustness": robustness, "kind": finish.kind or "", "samples_min": low, "samples_max": high}
    if not scored:
        ranks = [_rank(d, robustness, "unscored") for d in unscored]
        return FinishVerdict(
            **base, ranks=ranks, decided=True,
            sentence=f"No top deployment was feasible on any of its {_samples_words(finish)}.",
        )  # fmt: skip
    if finish.margin is None:  # the margin's default is the config's alone: it fills goal.equivalence_margin
        raise ValueError(
            "a finish with fresh scores but no equivalence margin: results/finish.py's finished() takes it from "
            "a validated config's goal.equivalence_margin; build the finish result with it"
        )
    stat = {d.key: statistic(d.scores, robustness) for d in scored}
    best_share = max(d.held_share for d in scored)
    contenders = [d for d in scored if d.held_share == best_share]
    leader = max(contenders, key=lambda d: (stat[d.key], -d.used_gpus))
    margin = finish.margin.of(stat[leader.key])
    bounds = _behind_the_best(contenders, robustness, looks=max(1, len(finish.looks)))
    ranks: dict[str, FinishedRank] = {}
    for d in contenders:
        lower, upper = bounds.get(d.key, (None, None))
        verdict: Verdict = "undecided"
        if upper is not None and upper <= margin:
            verdict = "equivalent"
        elif lower is not None and lower > 0:
            verdict = "behind"
        ranks[d.key] = _rank(d, robustness, verdict).model_copy(
            update={"behind": stat[leader.key] - stat[d.key], "behind_low": lower, "behind_high": upper,
                    "leader": d.key == leader.key, "beyond_margin": lower is not None and lower > margin}
        )  # fmt: skip
    if len(contenders) == 1:
        ranks[leader.key].verdict = "equivalent"  # nothing else held as often: the best of one, with no interval
    for key, p in _p_best(contenders, robustness).items():
        ranks[key].p_best = p
    equivalent = [d for d in contenders if ranks[d.key].equivalent]
    chosen = _preferred(equivalent, stat) if equivalent else leader
    ranks[chosen.key].recommended = True
    undecided = [d for d in contenders if ranks[d.key].verdict == "undecided"]
    open_ = [d for d in undecided if not equivalent or _prefers(d, chosen, stat)]
    rest = sorted((d for d in contenders if d.key != chosen.key), key=lambda d: (-stat[d.key], d.used_gpus))
    missed = sorted((d for d in scored if d not in contenders), key=lambda d: (-d.held_share, -stat[d.key]))
    order = [ranks[d.key] for d in [chosen, *rest]]
    order += [_rank(d, robustness, "missed") for d in missed] + [_rank(d, robustness, "unscored") for d in unscored]
    deployments = {d.key: d for d in finish.deployments}
    text = finish.margin.text()
    return FinishVerdict(
        **base,
        margin=margin,
        margin_text=text,
        ranks=order,
        decided=not open_,
        open_keys=[d.key for d in open_],
        contender_keys=[d.key for d in contenders if ranks[d.key].verdict != "behind"],
        sentence=_sentence(order, finish, deployments, text, stat[leader.key]),
        kendall_tau=_kendall_tau(scored, stat),
        recommended_meets_sla=_meets_sla(chosen),
    )


def _preferred(candidates: list[FinishedDeployment], stat: dict[str, float]) -> FinishedDeployment:
    """Fewest GPUs, then the lowest cost (within COST_TOLERANCE: equal), then the higher statistic."""
    fewest = min(d.used_gpus for d in candidates)
    pool = [d for d in candidates if d.used_gpus == fewest]
    cheapest = min(d.cost for d in pool)
    pool = [d for d in pool if d.cost <= cheapest + COST_TOLERANCE * abs(cheapest)]
    return max(pool, key=lambda d: stat[d.key])


def _prefers(a: FinishedDeployment, b: FinishedDeployment, stat: dict[str, float]) -> bool:
    """Would `a` be recommended over `b` were both shown equivalent?"""
    return _preferred([b, a], stat).key == a.key and a.key != b.key


def _behind_the_best(
    contenders: list[FinishedDeployment], robustness: str, looks: int
) -> dict[str, tuple[float | None, float | None]]:
    """Per contender, simultaneous (lower, upper) bounds on max_j mu_j - mu_i (None: unbounded that way).

    Half the family's error goes to each side. The upper bounds need only the K - 1 comparisons with
    the true best (Hsu's MCB), so each pair's upper bound is at (alpha / 2) / ((K - 1) L). A lower
    bound above 0 claims that some other is better, which must hold even when several are equal, so
    the lower bounds cover every ordered pair: (alpha / 2) / (K (K - 1) L) each.
    """
    count = len(contenders)
    if count < 2:
        return {}
    upper_alpha = (1 - CONFIDENCE) / 2 / ((count - 1) * looks)
    lower_alpha = (1 - CONFIDENCE) / 2 / (count * (count - 1) * looks)
    out: dict[str, tuple[float | None, float | None]] = {}
    for d in contenders:
        others = [other for other in contenders if other.key != d.key]
        lower = max(_pair_bounds(d, other, robustness, lower_alpha)[0] for other in others)
        upper = max(_pair_bounds(d, other, robustness, upper_alpha)[1] for other in others)
        out[d.key] = (lower if math.isfinite(lower) else None, upper if math.isfinite(upper) else None)
    return out


def _pair_bounds(a: FinishedDeployment, b: FinishedDeployment, robustness: str, alpha: float) -> tuple[float, float]:
    """One-sided bounds, each at level 1 - alpha, on stat(b) - stat(a), from the samples both were feasible on."""
    ours, theirs = _paired(a, b)
    if a.exact and b.exact and len(ours):
        gap = statistic(theirs, robustness) - statistic(ours, robustness)
        return gap, gap  # two exact replays of the same traffic: their difference is a fact
    n = len(ours)
    if n < 2:
        return -math.inf, math.inf
    if robustness == "mean":
        from scipy.stats import t

        differences = theirs - ours
        half = float(t.ppf(1 - alpha, n - 1)) * float(differences.std(ddof=1)) / math.sqrt(n)
        centre = float(differences.mean())
        return centre - half, centre + half
    draws = _draws(n)
    gaps = statistics_along(theirs[draws], robustness) - statistics_along(ours[draws], robustness)
    return float(np.quantile(gaps, alpha)), float(np.quantile(gaps, 1 - alpha))


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


def _rank(d: FinishedDeployment, robustness: str, verdict: Verdict) -> FinishedRank:
    scores = d.scores
    names = sorted({name for s in d.samples for name in s.metrics})
    return FinishedRank(
        key=d.key,
        search_score=d.search_score,
        statistic=statistic(scores, robustness) if scores else None,
        mean=float(np.mean(scores)) if scores else None,
        sd=float(np.std(scores, ddof=1)) if len(scores) > 1 else None,
        se=_standard_error(d, robustness),
        worst=min(scores) if scores else None,
        scored=len(scores),
        samples=len(d.samples),
        held=d.held,
        verdict=verdict,
        failed_samples=d.failed_samples,
        sla_miss=d.sla_miss_mean,
        metrics={name: value for name in names if (value := d.metric_mean(name)) is not None},
    )


def _standard_error(d: FinishedDeployment, robustness: str) -> float | None:
    """The bootstrap standard error of a deployment's statistic (0 when its samples are exact; None below 2)."""
    scores = np.asarray(d.scores, dtype=float)
    if d.exact:
        return 0.0
    if len(scores) < 2:
        return None
    return float(statistics_along(scores[_draws(len(scores))], robustness).std())


def _paired(a: FinishedDeployment, b: FinishedDeployment) -> tuple[np.ndarray, np.ndarray]:
    """Scores of a and b on the samples both were feasible on, in sample order."""
    mine = {s.index: s.score for s in a.samples if s.status == "feasible" and s.score is not None}
    theirs = {s.index: s.score for s in b.samples if s.status == "feasible" and s.score is not None}
    both = sorted(set(mine) & set(theirs))
    return np.array([mine[i] for i in both], dtype=float), np.array([theirs[i] for i in both], dtype=float)


@functools.cache
def _draws(n: int) -> np.ndarray:
    draws = np.random.default_rng(BOOTSTRAP_SEED).integers(0, n, size=(BOOTSTRAP_DRAWS, n))
    draws.flags.writeable = False  # shared between calls
    return draws


def _p_best(contenders: list[FinishedDeployment], robustness: str) -> dict[str, float]:
    """Share of paired bootstrap draws of the common samples in which each has the best statistic (ties split)."""
    feasible = [{s.index for s in d.samples if s.status == "feasible"} for d in contenders]
    indices = sorted(set.intersection(*feasible))
    if not indices:
        return {}
    table = np.array([[next(s.score for s in d.samples if s.index == i) for i in indices] for d in contenders])
    values = statistics_along(table[:, _draws(len(indices))], robustness)  # contenders x draws
    best = values == values.max(axis=0)
    wins = (best / best.sum(axis=0)).sum(axis=1)
    return {d.key: float(w) / BOOTSTRAP_DRAWS for d, w in zip(contenders, wins, strict=True)}


SAMPLE_WORDS = {
    "arrival": "fresh samples",
    "bootstrap": "resamples of the trace",
    "holdout": "replays of the held-out traffic",
    "repeat": "repeated replays",
}


def _samples_words(finish: FinishResult) -> str:
    low, high = finish.samples_used
    count = f"{low}" if low == high else f"{low}-{high}"
    words = SAMPLE_WORDS.get(finish.kind or "", "fresh samples")
    return f"{count} {words if high != 1 else words.replace('samples', 'sample').replace('replays', 'replay')}"


def _names(positions: list[int]) -> str:
    named = [f"#{p}" for p in positions]
    return named[0] if len(named) == 1 else ", ".join(named[:-1]) + f" and {named[-1]}"


def _share(value: float, best: float) -> str:
    return f"{100 * value / abs(best):.1f} %" if best else f"{value:.4g}"


def _why_preferred(chosen: FinishedDeployment, other: FinishedDeployment) -> str:
    if chosen.used_gpus < other.used_gpus:
        return "uses fewer GPUs"
    if chosen.cost < other.cost - COST_TOLERANCE * abs(other.cost):
        return "costs less"
    return "has the better statistic at the same GPUs and cost"


def _sentence(
    order: list[FinishedRank],
    finish: FinishResult,
    deployments: dict[str, FinishedDeployment],
    margin_text: str,
    best: float,
) -> str:
    """What was shown about the recommendation and the others, and what was not."""
    samples = _samples_words(finish)
    first = order[0]
    contenders = [r for r in order if r.verdict not in ("missed", "unscored")]
    leader = next(r for r in contenders if r.leader) if len(contenders) > 1 else first
    statistic_name = {"mean": "mean", "p10": "10th percentile", "worst": "worst sample"}[finish.robustness]
    parts = []
    if not first.held:
        parts.append(
            f"No finished deployment met the SLA on every sample: #1 met it on {first.scored} of {first.samples}"
        )
    position = {r.key: p for p, r in enumerate(order, start=1)}
    missed = [position[r.key] for r in order if r.verdict == "missed"]
    missed_text = f"{_names(missed)} missed the SLA on more samples" if missed else None
    if len(contenders) == 1:
        held = "met the SLA on as many" if not first.held else "held on all"
        parts.append(
            f"#1 is the only finished deployment that {held} of its {samples}" if len(order) > 1 else
            f"#1 is the only finished deployment ({samples})"
        )  # fmt: skip
        return "; ".join(parts + ([missed_text] if missed_text else [])) + "."
    if first.leader and first.equivalent:
        parts.append(
            f"#1 has the best {statistic_name} on {samples} and is shown within {margin_text} of the best at "
            f"{100 * CONFIDENCE:.0f} % (simultaneously)"
        )
    elif first.leader:
        parts.append(
            f"#1 has the best {statistic_name} on {samples}; no deployment was shown within {margin_text} of the "
            "best, so none replaces it"
        )
    else:
        mine, theirs = deployments[first.key], deployments[leader.key]
        fewer = theirs.used_gpus - mine.used_gpus
        why = (
            f"uses {fewer} GPU{'s' if fewer != 1 else ''} fewer than #{position[leader.key]}, the best on these samples"
            if fewer > 0
            else f"costs {100 * (1 - mine.cost / theirs.cost):.0f} % less than #{position[leader.key]}, the best on these samples"
            if theirs.cost > 0 and mine.cost < theirs.cost
            else f"#{position[leader.key]}, the best on these samples, is not itself shown within the margin"
            if not leader.equivalent
            else f"is preferred to #{position[leader.key]}, the best on these samples"
        )
        parts.append(
            f"#1 is within {_share(max(first.behind_high or 0.0, 0.0), best)} of the best at {100 * CONFIDENCE:.0f} % "
            f"(margin {margin_text}, on {samples}) and {why}"
        )
    behind = [position[r.key] for r in contenders if r.verdict == "behind"]
    if behind:
        parts.append(f"{_names(behind)} {'is' if len(behind) == 1 else 'are'} shown behind the best")
    for r in contenders[1:]:
        if r.verdict == "undecided":
            parts.append(
                f"#{position[r.key]} may be up to {_share(r.behind_high, best)} behind: not shown within the margin, "
                "not recommended"
                if r.behind_high is not None
                else f"#{position[r.key]} could not be bounded (fewer than 2 paired samples): not recommended"
            )
        elif r.verdict == "equivalent":
            parts.append(f"#{position[r.key]} is within the margin too; #1 {_why_preferred(deployments[first.key], deployments[r.key])}")
    if missed_text:
        parts.append(missed_text)
    return "; ".join(parts) + "."
