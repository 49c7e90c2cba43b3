"""Which finished deployment to recommend, and what its fresh samples show, as claims made for the family.

Each finished deployment has scores on fresh samples (results/finish.py), the same samples for all of them,
so two of them are compared sample by sample. The statistic is `goal.robustness`: the mean (default), the
10th percentile or the worst sample.

0. **Only what they share is compared.** The sequential finish (results/sequential.py) gives more samples
   only to the deployments not yet shown behind, past its cap only to the pair a rare-event check needs, and,
   once decided, to the recommendation alone:
   - a deployment given fewer samples than the leader is judged on the samples it has (its pairs are the ones
     that stopped it);
   - samples only one deployment was given (the recommendation's, for its level's precision) refine its
     reported statistic and are compared with nothing: a miss there is said, never acted on.
1. **Held first, look by look** (results/held.py). At every look, among the deployments given its samples,
   one that met the SLA on a smaller share of the samples it finished falls to *missed*; the contenders are the
   rest. A miss costs only the deployment that missed, and the recommendation's compared misses are said. A
   sample that hit the replay's time limit is no miss: the deployment is undecided there, never equivalent, and
   compared with no one while a deployment that finished every compared sample is in contention.
2. **Simultaneous bounds.** For each contender i, bounds on how far it is behind the best of the others,
   max_j mu_j - mu_i: from the paired comparison with each other contender j, one-sided bounds on
   stat_j - stat_i (results/pair_bounds.py), and the bounds are [max_j lower_ij, max_j upper_ij]. The upper
   bounds are Hsu's multiple comparisons with the best (they need only the K - 1 comparisons with the true
   best): each at (alpha / 4) / ((K - 1) L). The lower bounds must hold when several deployments are equal,
   so they cover every ordered pair: each at (alpha / 2) / (K (K - 1) L). Bonferroni, with L the looks the
   sequential finish may take (the rare-event check's included): every claim holds at 95 % for the whole
   family, whichever look stopped; the last alpha / 4 is the rare-event check's (results/rare_events.py).
   Exact replays (round robin on one trace) give facts about that traffic, not 95 % claims about another.
3. **Verdicts.** A contender is *equivalent* when its upper bound is at most the equivalence margin
   (`goal.equivalence_margin`, a share of the leader's statistic or a value in the goal's unit) and it was
   compared on enough samples that a failure on `goal.rare_event_share` of traffic windows would have shown;
   within the margin on fewer, it is *undecided* ("too few for rare events") if an equivalence would favour it
   over the recommendation (it then gets those samples), and otherwise what its bounds show. It is *behind*
   when its lower bound is above 0 (`beyond_margin` when above the margin too), otherwise *undecided*. "Not
   separated" is not equivalence. A leader every other contender is shown behind is the best by those claims.
4. **The recommendation.** Among the equivalent contenders: the fewest GPUs, then the lowest cost (US$ per
   million tokens when priced, else average GPUs; costs within COST_TOLERANCE of each other are equal), then
   the higher statistic. When none is shown equivalent, the **observed leader** (the best statistic on the
   compared samples), and the sentence leads with "nothing was shown best".
5. **P(best)**: among the contenders not shown behind, the share of paired bootstrap resamples of their
   shared samples in which each has the best statistic, a tie split evenly (fixed seed: the same files give
   the same numbers). A deployment shown behind has none: it is not in contention.

Values equal up to float noise (trial/outcome.py: `same_value`) are equal everywhere a leader or a tie is
chosen: the leader, the final tie-break and P(best). A tie is then broken by the search's order.
"""

from __future__ import annotations

import math

import numpy as np

from spica_lib.results.finish import FinishedDeployment, FinishResult
from spica_lib.results.finish_sentence import SentenceFacts, finish_sentence, samples_words
from spica_lib.results.held import fell_behind_on_held, misses, time_limits
from spica_lib.results.pair_bounds import (
    draws,
    pair_bounds,
    samples_for_a_claim,
    standard_error,
    statistic,
    statistics_along,
)
from spica_lib.results.rare_events import RARE_ALPHA
from spica_lib.results.verdict import CONFIDENCE, COST_TOLERANCE, FinishedRank, FinishVerdict, Verdict
from spica_lib.trial.outcome import SAME_RELATIVE, at_least, same_value

__all__ = ["FinishVerdict", "FinishedRank", "judge", "statistic"]


def judge(finish: FinishResult) -> FinishVerdict:
    """The finished top ranked by its fresh samples (see the module docstring)."""
    robustness = finish.robustness
    compared = _compared_views(finish.deployments)
    scored = [d for d in finish.deployments if compared[d.key].scores]
    unscored = [d for d in finish.deployments if not compared[d.key].scores]
    low, high = finish.samples_used
    base = {"robustness": robustness, "kind": finish.kind or "", "samples_min": low, "samples_max": high}
    if not scored:
        ranks = [_rank(d, compared[d.key], robustness, "unscored") for d in unscored]
        return FinishVerdict(
            **base, ranks=ranks, decided=True,
            sentence=f"No top deployment was feasible on any of its {samples_words(finish)}.",
        )  # fmt: skip
    if finish.margin is None:  # the margin's default is the config's alone: it fills goal.equivalence_margin
        raise ValueError(
            "a finish with fresh scores but no equivalence margin: results/finish.py's finished() takes it from "
            "a validated config's goal.equivalence_margin; build the finish result with it"
        )
    stat = {d.key: statistic(compared[d.key].scores, robustness) for d in scored}
    fell = fell_behind_on_held({d.key: compared[d.key] for d in scored}, finish.looks)
    contenders = [d for d in scored if d.key not in fell]
    # A time limit on a compared sample leaves the deployment undecided there: it is compared with no one while a
    # deployment that finished every compared sample is in contention (results/held.py).
    finished_all = [d for d in contenders if not time_limits(compared[d.key])]
    limited = [d for d in contenders if d not in finished_all] if finished_all else []
    contenders = finished_all or contenders
    most = max(len(compared[d.key].samples) for d in contenders)
    in_step = [d for d in contenders if len(compared[d.key].samples) == most]
    leader = _best(in_step, stat)
    margin = finish.margin.of(stat[leader.key])
    upper_alpha, lower_alpha = _alphas(len(contenders), finish.look_count)
    bounds = _behind_the_best([compared[d.key] for d in contenders], robustness, upper_alpha, lower_alpha)
    on_this_traffic = all(d.exact for d in contenders)
    rare_samples = None if on_this_traffic or len(contenders) < 2 else finish.rare_samples
    within = {
        d.key: (upper := bounds.get(d.key, (None, None))[1]) is not None and upper <= margin
        and not time_limits(compared[d.key])
        for d in contenders
    }  # fmt: skip
    ranks: dict[str, FinishedRank] = {}
    for d in contenders:
        lower, upper = bounds.get(d.key, (None, None))
        resolved = rare_samples is None or len(compared[d.key].samples) >= rare_samples
        # One given fewer samples than the leader is judged on the samples it has: the pairs that stopped it.
        verdict: Verdict = "undecided"
        if within[d.key] and resolved:
            verdict = "equivalent"
        elif lower is not None and lower > 0 and not within[d.key]:
            verdict = "behind"
        ranks[d.key] = _rank(d, compared[d.key], robustness, verdict).model_copy(
            update={"behind": stat[leader.key] - stat[d.key], "behind_low": lower, "behind_high": upper,
                    "leader": d.key == leader.key, "beyond_margin": lower is not None and lower > margin,
                    "on_this_traffic": on_this_traffic and len(contenders) > 1,
                    "too_few_for_rare_events": verdict == "undecided" and within[d.key]}
        )  # fmt: skip
    equivalent = [d for d in contenders if ranks[d.key].equivalent]
    chosen = _preferred(equivalent, stat) if equivalent else leader
    # The rare-event check: samples only for a deployment the equivalence would favour over the recommendation. One
    # within the margin on too few samples that it would not favour is what its bounds show: behind, or undecided.
    favoured = [d for d in in_step if ranks[d.key].too_few_for_rare_events and _prefers(d, chosen, stat)]
    for d in contenders:
        rank = ranks[d.key]
        if rank.too_few_for_rare_events and d not in favoured and rank.behind_low is not None and rank.behind_low > 0:
            rank.verdict, rank.too_few_for_rare_events = "behind", False
    if len(contenders) == 1:
        ranks[leader.key].verdict = "equivalent"  # nothing else held as often: the best of one, with no interval
    elif within[leader.key] and all(ranks[d.key].verdict == "behind" for d in contenders if d is not leader):
        # Every other is shown behind it: it is the best by those claims, not by an equivalence a failure could hide in.
        ranks[leader.key].verdict, ranks[leader.key].too_few_for_rare_events = "equivalent", False
    ranks[chosen.key].recommended = True
    in_play = [d for d in in_step if ranks[d.key].verdict != "behind"]
    for key, p in _p_best([compared[d.key] for d in in_play], robustness).items():
        ranks[key].p_best = p
    # What more samples could change. The bounds: an undecided contender that could still be shown within the
    # margin and be preferred (or any, while none is within it), as the samples' bounds alone would decide.
    bounded = [d for d in in_play if within[d.key]]
    chosen_by_bounds = _preferred(bounded, stat) if bounded else leader
    open_ = [
        d for d in in_play
        if ranks[d.key].verdict == "undecided" and not within[d.key] and (not bounded or _prefers(d, chosen_by_bounds, stat))
    ]  # fmt: skip
    partners = [p for p in (leader, chosen) if favoured and p not in favoured]
    rest = sorted((d for d in contenders if d.key != chosen.key), key=lambda d: (-stat[d.key], d.used_gpus))
    # Those that fell behind on held: the later they fell, the longer they held.
    missed = sorted((d for d in scored if d.key in fell), key=lambda d: (-fell[d.key], -stat[d.key]))
    order = [ranks[d.key] for d in [chosen, *rest]]
    order += [_rank(d, compared[d.key], robustness, "undecided") for d in sorted(limited, key=lambda d: -stat[d.key])]
    order += [_rank(d, compared[d.key], robustness, "missed") for d in missed]
    order += [_rank(d, compared[d.key], robustness, "unscored") for d in unscored]
    # With one contender nothing is compared, and exact replays compare by facts: one sample is enough for those.
    needed = samples_for_a_claim(robustness, upper_alpha) if len(contenders) > 1 and not on_this_traffic else 1
    facts = SentenceFacts(
        finish=finish,
        deployments={d.key: d for d in finish.deployments},
        margin_text=finish.margin.text(),
        best=stat[leader.key],
        samples_for_a_claim=needed,
        rare_samples=rare_samples,
        time_limited=[d.key for d in limited],
        why_preferred={r.key: _why_preferred(chosen, d, stat) for d in contenders if (r := ranks[d.key]).equivalent},
    )
    return FinishVerdict(
        **base,
        margin=margin,
        margin_text=facts.margin_text,
        ranks=order,
        decided=not open_ and not favoured,
        open_keys=[d.key for d in [*open_, *favoured]],
        contender_keys=[d.key for d in in_play],
        rare_keys=list(dict.fromkeys(d.key for d in [*favoured, *partners])),
        rare_samples=rare_samples,
        samples_for_a_claim=needed,
        sentence=finish_sentence(order, facts),
        kendall_tau=_kendall_tau(scored, stat),
        recommended_meets_sla=_meets_sla(chosen),
    )


def _compared_views(deployments: list[FinishedDeployment]) -> dict[str, FinishedDeployment]:
    """Each deployment on the samples it shares with at least one other: without the samples only it was given."""
    counts = sorted((len(d.samples) for d in deployments), reverse=True)
    shared_by_two = counts[1] if len(counts) > 1 else counts[0] if counts else 0
    return {d.key: _first(d, shared_by_two) for d in deployments}


def _first(d: FinishedDeployment, count: int) -> FinishedDeployment:
    """`d` on its samples of index below `count` (samples are given in index order: 0, 1, ...)."""
    if len(d.samples) <= count:
        return d
    return d.model_copy(update={"samples": [s for s in d.samples if s.index < count]})


def _best(candidates: list[FinishedDeployment], stat: dict[str, float]) -> FinishedDeployment:
    """The best statistic; values equal up to float noise tie, and a tie goes to fewer GPUs, then the search's order."""
    top = max(stat[d.key] for d in candidates)
    tied = [d for d in candidates if at_least(stat[d.key], top)]
    fewest = min(d.used_gpus for d in tied)
    return next(d for d in tied if d.used_gpus == fewest)


def _preferred(candidates: list[FinishedDeployment], stat: dict[str, float]) -> FinishedDeployment:
    """Fewest GPUs, then the lowest cost (within COST_TOLERANCE: equal), then the higher statistic (within float
    noise: equal, and the search's order decides)."""
    fewest = min(d.used_gpus for d in candidates)
    pool = [d for d in candidates if d.used_gpus == fewest]
    cheapest = min(d.cost for d in pool)
    pool = [d for d in pool if d.cost <= cheapest + COST_TOLERANCE * abs(cheapest)]
    return _best(pool, stat)


def _prefers(a: FinishedDeployment, b: FinishedDeployment, stat: dict[str, float]) -> bool:
    """Would `a` be recommended over `b` were both shown equivalent?"""
    return _preferred([b, a], stat).key == a.key and a.key != b.key


def _why_preferred(chosen: FinishedDeployment, other: FinishedDeployment, stat: dict[str, float]) -> str:
    if chosen.used_gpus < other.used_gpus:
        return "uses fewer GPUs"
    if chosen.cost < other.cost - COST_TOLERANCE * abs(other.cost):
        return "costs less"
    if same_value(stat[chosen.key], stat[other.key]):
        return (
            f"has the same statistic (equal within {SAME_RELATIVE:g} of itself) at the same GPUs and cost, and the "
            "search ranked it first"
        )
    return "has the better statistic at the same GPUs and cost"


def _alphas(count: int, looks: int) -> tuple[float, float]:
    """Each pair bound's level, upper and lower (module docstring, 2.): the equivalence side has half the family's
    error less the rare-event check's share (results/rare_events.py), the "behind" side half."""
    pairs = max(1, count - 1)
    upper = (1 - CONFIDENCE) / 2 - RARE_ALPHA
    return upper / (pairs * looks), (1 - CONFIDENCE) / 2 / (max(1, count) * pairs * looks)


def _behind_the_best(
    contenders: list[FinishedDeployment], robustness: str, upper_alpha: float, lower_alpha: float
) -> dict[str, tuple[float | None, float | None]]:
    """Per contender, simultaneous (lower, upper) bounds on max_j mu_j - mu_i (None: unbounded that way)."""
    if len(contenders) < 2:
        return {}
    out: dict[str, tuple[float | None, float | None]] = {}
    for d in contenders:
        others = [other for other in contenders if other.key != d.key]
        lower = max(pair_bounds(d, other, robustness, lower_alpha)[0] for other in others)
        upper = max(pair_bounds(d, other, robustness, upper_alpha)[1] for other in others)
        out[d.key] = (lower if math.isfinite(lower) else None, upper if math.isfinite(upper) else None)
    return out


def _p_best(in_play: list[FinishedDeployment], robustness: str) -> dict[str, float]:
    """Share of paired bootstrap draws of the shared feasible samples in which each has the best statistic (values
    equal up to float noise tie, and a tie is split)."""
    if len(in_play) == 1:
        return {in_play[0].key: 1.0}
    feasible = [{s.index for s in d.samples if s.status == "feasible"} for d in in_play]
    indices = sorted(set.intersection(*feasible)) if feasible else []
    if not indices:
        return {}
    table = np.array([[next(s.score for s in d.samples if s.index == i) for i in indices] for d in in_play])
    values = statistics_along(table[:, draws(len(indices))], robustness)  # deployments x draws
    top = values.max(axis=0)
    best = values >= top - SAME_RELATIVE * np.abs(top)
    wins = (best / best.sum(axis=0)).sum(axis=1)
    return {d.key: float(w) / len(top) for d, w in zip(in_play, wins, strict=True)}


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


def _rank(d: FinishedDeployment, compared: FinishedDeployment, robustness: str, verdict: Verdict) -> FinishedRank:
    scores = d.scores
    names = sorted({name for s in d.samples for name in s.metrics})
    return FinishedRank(
        key=d.key,
        search_score=d.search_score,
        statistic=statistic(scores, robustness) if scores else None,
        mean=float(np.mean(scores)) if scores else None,
        sd=float(np.std(scores, ddof=1)) if len(scores) > 1 else None,
        se=standard_error(d, robustness),
        worst=min(scores) if scores else None,
        scored=len(scores),
        samples=len(d.samples),
        compared=len(compared.samples),
        timed_out=time_limits(d),
        compared_misses=misses(compared),
        compared_time_limits=time_limits(compared),
        held=not misses(compared),
        verdict=verdict,
        failed_samples=d.failed_samples,
        sla_miss=d.sla_miss_mean,
        metrics={name: value for name in names if (value := d.metric_mean(name)) is not None},
    )
