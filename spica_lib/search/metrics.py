"""What the designer is told: the metrics it optimises, and how far an SLA miss was."""

from __future__ import annotations

import math

from spica_lib.config import OptimizationGoal
from spica_lib.trial.score import sla_miss
from spica_lib.trial.spec import TrialResult


def search_objectives(goal: OptimizationGoal) -> list[tuple[str, bool]]:
    """Metrics the designer optimises: one signed `objective`, or each Pareto objective raw."""
    if goal.is_pareto:
        return [(t.value, t.maximize) for t in goal.resolved_pareto_objectives]
    return [("objective", True)]


def designer_metrics(result: TrialResult, goal: OptimizationGoal) -> dict[str, float]:
    """What the designer is told. Rankings always use the true score.

    A goodput goal scores 0 for every candidate that misses its SLA, often most of the space: a
    flat plateau where a designer learns nothing. Such candidates, and those a percentile SLA makes
    infeasible, are told how far they missed instead (minus the log of the worst latency-to-bound
    ratio of the SLA's statistic), so the search climbs toward the SLA before it can climb the goal.
    """
    if result.status != "feasible":  # infeasible by a percentile SLA: told how far it missed
        if goal.is_pareto or result.sla_miss is None:
            return {}
        return {"objective": -math.log1p(result.sla_miss)}
    if goal.is_pareto:
        return dict(result.objectives or {})
    score = float(result.score)
    if score > 0 or not goal.target.needs_sla or goal.sla is None:
        return {"objective": score}
    miss = result.sla_miss if result.sla_miss is not None else sla_miss(result.metrics, goal)
    return {"objective": -math.log1p(miss)}
