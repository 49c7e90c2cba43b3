"""The sentence that explains a finish's recommendation: what was shown about it and the others, and what was not.

It claims no more than results/confidence.py decided: "at 95 % (simultaneously)" only for bounds from samples
that vary; "on this traffic" for exact replays of one trace; "nothing was shown" when the statistic cannot
support a claim with the finish's samples, and "nothing was shown best" before it names an observed leader; a
replay's time limit is never called an SLA miss, and an SLA miss on a compared sample is always said; every sentence
ends with what its sample count could not see (results/rare_events.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from spica_lib.results.finish import FinishedDeployment, FinishResult
from spica_lib.results.rare_events import resolution_words
from spica_lib.results.verdict import CONFIDENCE, FinishedRank

SAMPLE_WORDS = {
    "arrival": "fresh samples",
    "bootstrap": "resamples of the trace",
    "holdout": "replays of the held-out traffic",
    "repeat": "repeated replays",
}
STATISTIC_NAMES = {"mean": "mean", "p10": "10th percentile", "worst": "worst sample"}


@dataclass
class SentenceFacts:
    """What the sentence is made from, beside the ranks."""

    finish: FinishResult
    deployments: dict[str, FinishedDeployment]
    margin_text: str
    best: float  # the leader's statistic on the compared samples
    samples_for_a_claim: int | None  # paired samples a claim needs (None: the statistic supports none)
    rare_samples: int | None = None  # compared samples an equivalence needs (goal.rare_event_share; None: no check)
    time_limited: list[str] = field(default_factory=list)  # undecided on a time-limited sample, compared with no one
    why_preferred: dict[str, str] = field(default_factory=dict)  # equivalent rank key -> why #1 was preferred to it


def samples_words(finish: FinishResult) -> str:
    low, high = finish.samples_used
    count = f"{low}" if low == high else f"{low}-{high}"
    words = SAMPLE_WORDS.get(finish.kind or "", "fresh samples")
    return f"{count} {words if high != 1 else words.replace('samples', 'sample').replace('replays', 'replay')}"


def finish_sentence(order: list[FinishedRank], facts: SentenceFacts) -> str:
    finish = facts.finish
    samples = samples_words(finish)
    first = order[0]
    contenders = [r for r in order if r.verdict not in ("missed", "unscored") and r.key not in facts.time_limited]
    leader = next(r for r in contenders if r.leader) if len(contenders) > 1 else first
    statistic_name = STATISTIC_NAMES[finish.robustness]
    most = finish.looks[-1] if finish.looks else first.samples
    no_claim = len(contenders) > 1 and (facts.samples_for_a_claim is None or facts.samples_for_a_claim > most)
    exact = first.on_this_traffic
    short = "on this traffic" if exact else f"at {100 * CONFIDENCE:.0f} %"
    level = "on this traffic (exact replays of one trace: a fact about it, not a claim about other traffic)" if exact \
        else f"at {100 * CONFIDENCE:.0f} % (simultaneously)"  # fmt: skip
    parts = []
    if first.compared_misses:
        parts.append(
            f"#1 missed the SLA on {first.compared_misses} of its {first.compared} compared samples, and no deployment "
            f"given as many met it more often" + (f"; it {_time_limits(first)}" if first.compared_time_limits else "")
        )
    position = {r.key: p for p, r in enumerate(order, start=1)}
    missed = [r for r in order if r.verdict == "missed"]
    missed_text = f"{_names([position[r.key] for r in missed])} missed the SLA more often" if missed else None
    if len(contenders) == 1:
        held = "met the SLA as often" if not first.held else "held on all"
        parts.append(
            f"#1 is the only finished deployment that {held} of its {samples}" if len(order) > 1 else
            f"#1 is the only finished deployment ({samples})"
        )  # fmt: skip
    elif no_claim:
        needs = (
            f"a claim about the {statistic_name} needs at least {facts.samples_for_a_claim} paired samples at this "
            f"family's level and the finish has at most {most} (sweep.finish_max_samples)"
            if facts.samples_for_a_claim is not None
            else "the worst sample bounds nothing without assuming the distribution's shape"
        )
        parts.append(
            f"Nothing was shown: {needs}, so no deployment is equivalent or behind, all are undecided; #1 has the "
            f"best {statistic_name} on {samples}"
        )
    elif first.leader and first.equivalent:
        parts.append(
            f"#1 has the best {statistic_name} on {samples} and is shown within {facts.margin_text} of the best {level}"
        )
    elif first.leader:
        parts.append(f"Nothing was shown best on {samples}: " + _observed_leader(first, facts, statistic_name, short))
    else:
        parts.append(_not_the_leader(first, leader, position, facts, samples, short))
    said = first.compared_misses or (first.leader and not first.equivalent and len(contenders) > 1 and not no_claim)
    if first.compared_time_limits and not said:
        parts.append(f"#1 {_time_limits(first)}")
    if len(contenders) > 1 and not no_claim:
        parts += _others(contenders, position, facts, facts.best)
    if not exact:
        parts.append(resolution_words(first.compared))
    limited = [r for r in order if r.key in facts.time_limited]
    if limited:
        parts.append(
            f"{_names([position[r.key] for r in limited])} hit the replay's time limit on a compared sample, where "
            f"{'it is' if len(limited) == 1 else 'they are'} undecided (not an SLA miss): compared with no deployment "
            "that finished every sample, not recommended"
        )
    if first.own_samples:
        parts.append(_own_samples(facts.deployments[first.key], first))
    if missed_text:
        parts.append(missed_text)
    parts += [f"#{position[r.key]} {_unscored(r)}" for r in order if r.verdict == "unscored"]
    return "; ".join(parts) + "."


def _unscored(rank: FinishedRank) -> str:
    """A deployment with no score on any compared sample: why, a time limit said as such."""
    limits, misses = rank.compared_time_limits, rank.compared_misses
    if limits and not misses:
        return f"hit the replay's time limit on all {limits} of its compared samples: undecided, not scored"
    if limits:
        return f"met the SLA on none of its compared samples ({misses} missed, {limits} hit the replay's time limit)"
    return "met the SLA on none of its compared samples"


def _observed_leader(first: FinishedRank, facts: SentenceFacts, statistic_name: str, level: str) -> str:
    """Why the leader is recommended without being shown best (the sentence's lead says nothing was)."""
    if first.too_few_for_rare_events:
        return (
            f"#1 has the best {statistic_name} and is within {facts.margin_text} of the best on them {level}, but an "
            f"equivalence needs {facts.rare_samples} compared samples (goal.rare_event_share "
            f"{_percent(facts.finish.rare_event_share)}) and it has {first.compared}, so it is recommended as the "
            "observed leader"
        )
    if first.compared_time_limits:
        return (
            f"#1 has the best {statistic_name} on the samples it finished but {_time_limits(first)}; it is "
            "recommended as the observed leader"
        )
    return (
        f"no deployment was shown within {facts.margin_text} of the best {level}, so #1 is recommended as the "
        f"observed leader (the best {statistic_name})"
    )


def _time_limits(rank: FinishedRank) -> str:
    """A time limit on a compared sample: no verdict on that sample, so no equivalence either."""
    count = rank.compared_time_limits
    return (
        f"hit the replay's time limit on {count} compared sample{'s' if count != 1 else ''}, where it is undecided "
        "(not an SLA miss), so it is not called equivalent"
    )


def _percent(share: float | None) -> str:
    return f"{100 * share:g} %" if share is not None else "unset"


def _not_the_leader(
    first: FinishedRank, leader: FinishedRank, position: dict[str, int], facts: SentenceFacts, samples: str, level: str
) -> str:
    mine, theirs = facts.deployments[first.key], facts.deployments[leader.key]
    fewer = theirs.used_gpus - mine.used_gpus
    where = f"#{position[leader.key]}, the best on these samples"
    why = (
        f"uses {fewer} GPU{'s' if fewer != 1 else ''} fewer than {where}"
        if fewer > 0
        else f"costs {100 * (1 - mine.cost / theirs.cost):.0f} % less than {where}"
        if theirs.cost > 0 and mine.cost < theirs.cost
        else f"{where}, is not itself shown within the margin"
        if not leader.equivalent
        else f"is preferred to {where}: it {facts.why_preferred.get(leader.key, 'is preferred')}"
    )
    gap = _share(max(first.behind_high or 0.0, 0.0), facts.best)
    return f"#1 is within {gap} of the best {level} (margin {facts.margin_text}, on {samples}) and {why}"


def _others(contenders: list[FinishedRank], position: dict[str, int], facts: SentenceFacts, best: float) -> list[str]:
    parts = []
    behind = [position[r.key] for r in contenders if r.verdict == "behind"]
    if behind:
        parts.append(f"{_names(behind)} {'is' if len(behind) == 1 else 'are'} shown behind the best")
    for r in contenders[1:]:
        if r.too_few_for_rare_events:
            parts.append(
                f"#{position[r.key]} is within the margin on these samples too, but {r.compared} are too few to call "
                f"it equivalent (an equivalence needs {facts.rare_samples})"
            )
        elif r.verdict == "undecided" and r.compared_time_limits:
            parts.append(f"#{position[r.key]} {_time_limits(r)}")
        elif r.verdict == "undecided":
            parts.append(
                f"#{position[r.key]} may be up to {_share(r.behind_high, best)} behind: not shown within the margin, "
                "not recommended"
                if r.behind_high is not None
                else f"#{position[r.key]} could not be bounded (fewer than 2 paired samples): not recommended"
            )
        elif r.verdict == "equivalent":
            parts.append(f"#{position[r.key]} is within the margin too; #1 {facts.why_preferred.get(r.key, '')}")
    return parts


def _own_samples(d: FinishedDeployment, first: FinishedRank) -> str:
    """The recommendation's precision samples: compared with nothing, and what happened on them."""
    own = first.own_samples
    text = (
        f"#1 was also given {own} sample{'s' if own != 1 else ''} of its own for the precision of its level, "
        "compared with no other deployment"
    )
    failed = [s.status for s in d.samples if s.index >= first.compared and s.status != "feasible"]
    if failed:
        timed = failed.count("timed_out")
        parts = [f"missed the SLA on {len(failed) - timed}"] if len(failed) > timed else []
        parts += [f"hit the replay's time limit on {timed}"] if timed else []
        text += f" ({' and '.join(parts)} of them: said, not acted on)"
    return text


def _names(positions: list[int]) -> str:
    named = [f"#{p}" for p in positions]
    return named[0] if len(named) == 1 else ", ".join(named[:-1]) + f" and {named[-1]}"


def _share(value: float, best: float) -> str:
    return f"{100 * value / abs(best):.1f} %" if best else f"{value:.4g}"
