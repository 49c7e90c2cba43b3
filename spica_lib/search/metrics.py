"""What the designer is told: the metrics it optimises, and how far an SLA miss was."""

from __future__ import annotations

import math

from spica_lib.config import OptimizationGoal
from spica_lib.trial.spec import TrialResult


def search_objectives(goal: OptimizationGoal) -> list[tuple[str, bool]]:
    """Metrics the designer optimises: one signed `objective`, or each Pareto objective raw."""
    if goal.is_pareto:
        return [(t.value, t.maximize) for t in goal.resolved_pareto_objectives]
    return [("objective", True)]


def designer_metrics(result: TrialResult, goal: OptimizationGoal) -> dict[str, float]:
    """What the designer is told. Rankings always use the true score.

    A goodput goal scores 0 for every candidate that misses its SLA, often most of the space: a
    flat plateau where a designer learns nothing. Such candidates are told how far they missed
    instead (minus the log of the worst latency-to-bound ratio), so the search climbs toward the
    SLA before it can climb goodput.
    """
    if goal.is_pareto:
        return dict(result.objectives or {})
    score = float(result.score)
    if score > 0 or not goal.target.needs_sla or goal.sla is None:
        return {"objective": score}
    return {"objective": -math.log1p(sla_miss(result.metrics, goal))}


def sla_miss(metrics: dict[str, float], goal: OptimizationGoal) -> float:
    """The worst ratio of a mean latency to its SLA bound (above 1 means the bound is missed)."""
    sla = goal.sla
    pairs = [("mean_ttft_ms", sla.ttft_ms), ("mean_itl_ms", sla.itl_ms), ("mean_e2e_latency_ms", sla.e2e_ms)]
    ratios = [metrics.get(key, math.inf) / bound for key, bound in pairs if bound]
    worst = max(ratios, default=1.0)
    return worst if math.isfinite(worst) else 1e6
