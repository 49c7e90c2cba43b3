"""The sentence that explains a finish's recommendation: what was shown about it and the others, and what was not.

It claims no more than results/confidence.py decided: "at 95 % (simultaneously)" only for bounds from samples
that vary; "on this traffic" for exact replays of one trace; "nothing was shown" when the statistic cannot
support a claim with the finish's samples; a replay's time limit is never called an SLA miss.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from spica_lib.results.finish import FinishedDeployment, FinishResult
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
    why_preferred: dict[str, str] = field(default_factory=dict)  # equivalent rank key -> why #1 was preferred to it


def samples_words(finish: FinishResult) -> str:
    low, high = finish.samples_used
    count = f"{low}" if low == high else f"{low}-{high}"
    words = SAMPLE_WORDS.get(finish.kind or "", "fresh samples")
    return f"{count} {words if high != 1 else words.replace('samples', 'sample').replace('replays', 'replay')}"


def finish_sentence(order: list[FinishedRank], facts: SentenceFacts) -> str:
    finish, best = facts.finish, facts.best
    samples = samples_words(finish)
    first = order[0]
    contenders = [r for r in order if r.verdict not in ("missed", "unscored")]
    leader = next(r for r in contenders if r.leader) if len(contenders) > 1 else first
    statistic_name = STATISTIC_NAMES[finish.robustness]
    most = finish.looks[-1] if finish.looks else first.samples
    no_claim = len(contenders) > 1 and (facts.samples_for_a_claim is None or facts.samples_for_a_claim > most)
    exact = first.on_this_traffic
    level = "on this traffic (exact replays of one trace: a fact about it, not a claim about other traffic)" if exact \
        else f"at {100 * CONFIDENCE:.0f} % (simultaneously)"  # fmt: skip
    parts = []
    if not first.held:
        every = "every sample" + (" they all had" if finish.samples_used[0] < finish.samples_used[1] else "")
        parts.append(f"No finished deployment met the SLA on {every}: #1 {_held_on(facts, first, finish)}")
    position = {r.key: p for p, r in enumerate(order, start=1)}
    missed = [r for r in order if r.verdict == "missed"]
    missed_text = (
        f"{_names([position[r.key] for r in missed])} {_failed_words(missed)} on more samples" if missed else None
    )
    if len(contenders) == 1:
        held = "met the SLA on as many" if not first.held else "held on all"
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
            f"#1 has the best {statistic_name} on {samples}; {needs}, so nothing was shown: no deployment is "
            "equivalent or behind, all are undecided"
        )
    elif first.leader and first.equivalent:
        parts.append(
            f"#1 has the best {statistic_name} on {samples} and is shown within {facts.margin_text} of the best {level}"
        )
    elif first.leader:
        parts.append(
            f"#1 has the best {statistic_name} on {samples}; no deployment was shown within {facts.margin_text} of "
            "the best, so none replaces it"
        )
    else:
        short = "on this traffic" if exact else f"at {100 * CONFIDENCE:.0f} %"
        parts.append(_not_the_leader(first, leader, position, facts, samples, short))
    if len(contenders) > 1 and not no_claim:
        parts += _others(contenders, position, facts, best)
    if first.own_samples:
        parts.append(_own_samples(facts.deployments[first.key], first))
    if missed_text:
        parts.append(missed_text)
    return "; ".join(parts) + "."


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
        if r.verdict == "undecided":
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


def _held_on(facts: SentenceFacts, first: FinishedRank, finish: FinishResult) -> str:
    """How #1 did on the samples every deployment had, a time limit said as such."""
    shared = finish.samples_used[0]
    failed = [s.status for s in facts.deployments[first.key].samples if s.index < shared and s.status != "feasible"]
    timed = failed.count("timed_out")
    text = f"met it on {shared - len(failed)} of {shared}"
    return text + (f" ({timed} hit the replay's time limit)" if timed else "")


def _failed_words(ranks: list[FinishedRank]) -> str:
    timed = any(r.timed_out for r in ranks)
    missed = any(len(r.failed_samples) > r.timed_out for r in ranks)
    if timed and missed:
        return "missed the SLA or hit the replay's time limit"
    return "hit the replay's time limit" if timed else "missed the SLA"


def _names(positions: list[int]) -> str:
    named = [f"#{p}" for p in positions]
    return named[0] if len(named) == 1 else ", ".join(named[:-1]) + f" and {named[-1]}"


def _share(value: float, best: float) -> str:
    return f"{100 * value / abs(best):.1f} %" if best else f"{value:.4g}"
