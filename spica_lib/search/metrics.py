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
    """What the designer is told (always higher is better). Rankings always use the true score.

    Two regions, one below the other, whatever the target's direction:
    - a feasible trial is told a value >= 0: the score of a maximised target (all of them are counts
      or rates, never negative), or `feasible_value` of a minimised one (latency, cost), which falls
      as the latency or cost grows but stays above 0;
    - a trial that missed (infeasible by a percentile SLA, screened, stopped after its prefix) is told
      minus the log of one plus its worst latency-to-bound ratio: below 0, lower the further it missed,
      so the search climbs toward the SLA before it can climb the goal.
    A goodput goal scores 0 for every candidate that misses its SLA, often most of the space: a flat
    plateau where a designer learns nothing, so those are told their miss too. A trial with no miss
    to tell is told nothing (Vizier marks it infeasible, below every value).

    A pruned trial (a goodput target, stopped once its score could no longer reach the sweep's k-th
    best: replay/early_stop.py) is not infeasible: it is told the optimistic bound it was pruned with,
    the most its score could have been. That never tells a region worse than it is, and it is still
    below the k trials the branch has, so the designer is not drawn to it either.
    """
    if result.status == "pruned" and result.stop is not None and result.stop.score_bound is not None:
        return {"objective": result.stop.score_bound}
    if result.status != "feasible":
        if goal.is_pareto or result.sla_miss is None:
            return {}
        return {"objective": missed_value(result.sla_miss)}
    if goal.is_pareto:
        return dict(result.objectives or {})
    score = float(result.score)
    if not goal.target.maximize:
        return {"objective": feasible_value(-score)}
    if score > 0 or not goal.target.needs_sla or goal.sla is None:
        return {"objective": score}
    miss = result.sla_miss if result.sla_miss is not None else sla_miss(result.metrics, goal)
    return {"objective": missed_value(miss)}


def missed_value(miss: float) -> float:
    """Below 0 for any miss ratio, falling as the miss grows."""
    return -math.log1p(max(miss, 0.0))


def feasible_value(cost: float) -> float:
    """A minimised quantity (latency in ms, US$ per million tokens) told as a value in (0, 1]: lower cost, higher
    value, and above every missed trial's. The log keeps the order and a usable spread from 1 to 10^6."""
    if not math.isfinite(cost):
        return 0.0
    return 1.0 / (1.0 + math.log1p(max(cost, 0.0)))
