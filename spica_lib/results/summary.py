"""Artifact `summary.json` of stage `merge`: the sweep's tallies, failure reasons with counts, best value and
replay time, and the one line that says them.

With a finish (results/finish.py) the best value is the recommendation's fresh-sample statistic; the best
score on the search's own sample is kept beside it, named as such. The stress test, the capacity
bisection and the baselines add their sentences.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from spica_lib.baselines.compare import BaselineRatio, compare, ratio_text
from spica_lib.baselines.model import BaselinesResult
from spica_lib.config import SmartSearchConfig
from spica_lib.results.capacity import CapacityResult
from spica_lib.results.confidence import FinishedRank, judge
from spica_lib.results.finish import FinishResult
from spica_lib.results.finish_sentence import SAMPLE_WORDS as CONFIDENCE_SAMPLE_WORDS
from spica_lib.results.merge import CandidateRow
from spica_lib.results.stress import StressResult
from spica_lib.search.history import BranchHistory
from spica_lib.trial.score import UNITS, score_text
from spica_lib.trial.spec import TrialRecord

SCHEMA_VERSION = 1
TALLY_KEYS = ("feasible", "infeasible", "failed", "timed_out", "unsupported", "cache_hit", "pruned")
# How a replay was stopped before its end, per unique trial (replay/early_stop.py, replay/stall.py).
STOP_WORDS = {
    "percentile": "certain to miss the percentile SLA (infeasible)",
    "coverage": "certain to miss the coverage floor (infeasible)",
    "prune": "pruned below the sweep's top {rank}",
    "stalled": "stopped for their pace (timed out)",
}


class SweepSummary(BaseModel):
    """Artifact `summary.json`."""

    model_config = ConfigDict(extra="forbid")

    schema_version: int = SCHEMA_VERSION
    goal: str
    tallies: dict[str, int]
    unique_trials: int
    failure_reasons: dict[str, int]
    best_score: float | None  # signed (higher is better): the recommendation's fresh-sample statistic with a finish
    search_best_score: float | None = None  # the best score on the search's own traffic sample (biased upward)
    # best_score as people read it: the goal's own quantity, positive for a minimised target too, and its unit.
    best_value: float | None = None
    unit: str | None = None
    front_size: int | None
    replay_cpu_seconds: float
    replay_wall_seconds: float
    optimizer_seconds: float
    branches: dict[str, dict[str, Any]]
    line: str
    # The finish: the finished top in its final order (the recommendation first), and why that order.
    finish: list[FinishedRank] = Field(default_factory=list)
    finish_samples: int = 0  # the most fresh samples a finished deployment got
    finish_samples_min: int = 0  # the fewest (a deployment shown behind stops at the first look)
    finish_kind: str | None = None  # arrival: fresh Poisson draws; bootstrap: trace resamples; holdout; repeat
    robustness: str | None = None
    finish_note: str | None = None
    finish_stopped: str | None = None  # why the sequential finish drew no more samples
    finish_decided: bool | None = None  # False: more samples could still have changed the recommendation
    equivalence_margin: str | None = None  # as configured ("5 %", or a value in the goal's unit)
    rare_event_share: str | None = None  # goal.rare_event_share, as a share ("10 %"; None: no such check)
    finish_kendall_tau: float | None = None  # the search's order of the finished top against their fresh order
    finish_meets_sla: bool | None = None  # the recommendation met the SLA on every fresh sample (None: no SLA)
    # The winner's score over each baseline's, both on the search's traffic sample (baselines/).
    baselines: list[BaselineRatio] = Field(default_factory=list)
    # The stress test (results/stress.py): whether the recommendation stays first under perturbed step times.
    stress_survives: bool | None = None
    stress_flips: list[str] = Field(default_factory=list)
    stress_note: str | None = None
    # Capacity (results/capacity.py): how much load the recommendation takes within the SLA.
    capacity_note: str | None = None
    # The share of the recommendation's requests that met every SLA bound (its fresh mean after a finish), and a
    # warning when it is under COVERAGE_WARNING_SHARE.
    sla_coverage: float | None = None
    coverage_warning: str | None = None
    # Replays stopped before their end, per rule (unique trials; STOP_WORDS), counted apart from the tallies'
    # statuses: "percentile" and "coverage" are infeasible, "prune" pruned, "stalled" timed out.
    early_stops: dict[str, int] = Field(default_factory=dict)
    prune_rank: int | None = None  # the k of the prune rule: a pruned trial could not rank in the sweep's top k


def summarise(
    config: SmartSearchConfig,
    histories: list[BranchHistory],
    records: dict[str, TrialRecord],
    best: list[CandidateRow],
    baselines: BaselinesResult | None = None,
    finish: FinishResult | None = None,
    stress: StressResult | None = None,
    capacity: CapacityResult | None = None,
) -> SweepSummary:
    """`best` is the ranking after the finish (apply_finish), `finish` what the finish replayed."""
    tallies = Counter({key: 0 for key in TALLY_KEYS})
    reasons: Counter[str] = Counter()
    branches = {}
    for history in histories:
        counts = Counter(o.status for o in history.observations)
        tallies.update(counts)
        reasons.update(o.reason for o in history.observations if o.status in ("failed", "timed_out") and o.reason)
        branches[history.deployment_mode] = {
            "rounds": len(history.tallies),
            "observations": len(history.observations),
            "stalled": history.stalled,
            "stall_reason": history.stall_reason,
            "counts": dict(counts),
        }
    results = [r.result for r in records.values()]
    is_pareto = config.goal.is_pareto
    finished = [row.finish for row in best if row.finish is not None]
    search_best = max((r.candidate.score for r in best), default=None)
    recommended = finished[0] if finished and finished[0].statistic is not None else None
    best_score = recommended.statistic if recommended is not None else search_best
    target = config.goal.target
    summary = SweepSummary(
        goal=target.value,
        tallies=dict(tallies),
        unique_trials=len(records),
        failure_reasons=dict(reasons.most_common()),
        best_score=best_score,
        search_best_score=search_best,
        best_value=None if best_score is None or is_pareto else (best_score if target.maximize else -best_score),
        unit=None if is_pareto else UNITS[target],
        front_size=len(best) if is_pareto else None,
        replay_cpu_seconds=sum(r.cpu_seconds for r in results),
        replay_wall_seconds=sum(r.wall_seconds for r in results),
        optimizer_seconds=sum(t.optimizer_seconds for h in histories for t in h.tallies),
        branches=branches,
        line="",
        finish=finished,
    )
    if finish is not None and finished:
        verdict = judge(finish)
        summary.finish_samples, summary.finish_samples_min = verdict.samples_max, verdict.samples_min
        summary.finish_kind, summary.robustness = finish.kind, finish.robustness
        summary.finish_note = verdict.sentence
        summary.finish_stopped, summary.finish_decided = finish.stopped, verdict.decided
        summary.equivalence_margin = verdict.margin_text
        summary.rare_event_share = f"{100 * finish.rare_event_share:g} %" if finish.rare_event_share else None
        summary.finish_kendall_tau = verdict.kendall_tau
        summary.finish_meets_sla = verdict.recommended_meets_sla
    if best and config.goal.sla is not None and not is_pareto:
        fresh = best[0].finish.metrics.get("sla_coverage") if best[0].finish is not None else None
        summary.sla_coverage = fresh if fresh is not None else best[0].candidate.metrics.get("sla_coverage")
        summary.coverage_warning = coverage_warning(config, summary.sla_coverage)
    if baselines is not None and best:
        # The baselines are replayed on the search's traffic sample: the winner is compared on that sample too.
        summary.baselines = compare(config.goal, best[0].candidate.score, baselines.baselines)
    if stress is not None and stress.sentence is not None:
        summary.stress_survives, summary.stress_flips, summary.stress_note = stress.survives, stress.flips, stress.sentence
    if capacity is not None:
        summary.capacity_note = capacity.sentence(0) or capacity.note
    summary.early_stops, summary.prune_rank = early_stops(results)
    summary.line = summary_line(config, summary)
    return summary


def early_stops(results: list[Any]) -> tuple[dict[str, int], int | None]:
    """How many unique trials each early-stop rule ended (a stalled replay counts as "stalled"), and the
    prune rule's k."""
    stops: Counter[str] = Counter()
    rank = None
    for result in results:
        rule = early_stop_rule(result)
        if rule is not None:
            stops[rule] += 1
        if result.stop is not None:
            rank = result.stop.rank or rank
    return dict(stops), rank


def early_stop_rule(result: Any) -> str | None:
    """The rule that ended a replay before its end ("stalled": stopped for its pace), or None (it ran to the end)."""
    if result.stop is not None:
        return result.stop.rule
    if result.status == "timed_out" and (result.reason or "").startswith("stalled"):
        return "stalled"
    return None


def stops_text(summary: SweepSummary) -> str:
    """The early stops in words: `2 pruned below the sweep's top 5, 1 stopped for their pace (timed out)`."""
    return ", ".join(
        f"{count} {STOP_WORDS.get(rule, rule).format(rank=summary.prune_rank)}"
        for rule, count in sorted(summary.early_stops.items())
    )


# Below this share of requests within the SLA, the summary warns: a goodput-per-GPU goal can be served best by
# dropping traffic (a deployment that meets the SLA for 61 % of a trace's requests on 10 GPUs outscores one that
# meets it for 89 % on 14), and a user sizing a fleet expects the SLA to hold for most requests.
COVERAGE_WARNING_SHARE = 0.9


def coverage_warning(config: SmartSearchConfig, coverage: float | None) -> str | None:
    """A warning when the recommendation meets the SLA for less than COVERAGE_WARNING_SHARE of its requests."""
    goal = config.goal
    if coverage is None or coverage >= COVERAGE_WARNING_SHARE:
        return None
    floor = goal.sla_coverage
    if floor is not None and coverage >= floor:
        return None  # the user asked for this floor, and it holds
    hint = (
        f"set goal.sla_coverage (e.g. {COVERAGE_WARNING_SHARE:g}) to require a share"
        if floor is None
        else f"it is under goal.sla_coverage {floor:g} on the fresh samples"
    )
    return (
        f"the recommendation meets the SLA for only {100 * coverage:.0f} % of requests (under "
        f"{100 * COVERAGE_WARNING_SHARE:.0f} %): {goal.target.value} counts only the requests that meet it, so "
        f"serving fewer of them can score best; {hint}"
    )


def summary_line(config: SmartSearchConfig, summary: SweepSummary) -> str:
    t = summary.tallies
    pruned = t.get("pruned", 0)
    attempts = t["feasible"] + t["infeasible"] + t["failed"] + t["timed_out"] + pruned
    line = (
        f"spica done: {t['feasible']}/{attempts} replay attempt(s) feasible, {t['infeasible']} infeasible, "
        + (f"{pruned} pruned, " if pruned else "")
        + f"{t['unsupported']} backend-unsupported, {t['failed']} replay-failed, {t['timed_out']} timed out, "
        f"{t['cache_hit']} cache hit(s)"
    )
    if summary.early_stops:
        line += f" (stopped early: {stops_text(summary)})"
    if summary.best_score is None:
        line += " — NO feasible candidate (check backends / SLA / gpu_budget / replay errors)"
    elif summary.front_size is not None:
        line += f"; pareto front: {summary.front_size} non-dominated candidate(s)"
    elif summary.finish and summary.finish[0].statistic is not None:
        target = config.goal.target
        low, high = summary.finish_samples_min, summary.finish_samples
        count = f"{high}" if low == high else f"{low}-{high}"
        line += (
            f"; best {score_text(summary.best_score, target)} ({summary.robustness} of {count} "
            f"{SAMPLE_WORDS[summary.finish_kind]}; "
            f"{score_text(summary.finish[0].search_score, target, name=False)} on the search's sample)"
        )
        line += coverage_text(summary)
        line += f"\nfinish: {summary.finish_note}"
        if summary.finish_decided is False:
            line += f" ({summary.finish_stopped}: more samples could still change it)"
        if summary.finish_kind == "holdout":
            line += "\nheld-out check: " + held_out_text(summary)
    else:
        line += f"; best {score_text(summary.best_score, config.goal.target)}" + coverage_text(summary)
    if summary.coverage_warning:
        line += f"\nWARNING: {summary.coverage_warning}"
    if summary.stress_note:
        line += f"\nsimulator error: {summary.stress_note}"
    if summary.capacity_note:
        line += f"\ncapacity: {summary.capacity_note}"
    if summary.baselines:
        line += "\nbaselines: " + "; ".join(ratio_text(b, config.goal) for b in summary.baselines)
    if summary.failure_reasons:
        shown = [f"{r} (x{n})" if n > 1 else r for r, n in list(summary.failure_reasons.items())[:3]]
        more = len(summary.failure_reasons) - 3
        line += (
            "\nfailure reason(s): " + " | ".join(shown) + (f" | +{more} more distinct reason(s)" if more > 0 else "")
        )
    return line


SAMPLE_WORDS = {**CONFIDENCE_SAMPLE_WORDS, None: "samples"}


def coverage_text(summary: SweepSummary) -> str:
    """`; 94 % of requests within the SLA` for the summary line (nothing without an SLA)."""
    if summary.sla_coverage is None:
        return ""
    fresh = " (fresh mean)" if summary.finish and summary.finish[0].metrics.get("sla_coverage") is not None else ""
    return f"; {100 * summary.sla_coverage:.0f} % of requests within the SLA{fresh}"


def held_out_text(summary: SweepSummary) -> str:
    """What the held-out part of a trace says of the answer, in one sentence."""
    tau = summary.finish_kendall_tau
    order = (
        "the finished top cannot be ordered (ties)" if tau is None
        else f"Kendall's tau {tau:.2f} between the search's order of the finished top and their held-out order"
    )  # fmt: skip
    meets = {
        True: "the recommendation meets the SLA on the held-out traffic",
        False: "the recommendation MISSES the SLA on the held-out traffic",
        None: "no SLA to check",
    }[summary.finish_meets_sla]
    return f"{order}; {meets}."
