"""When two replayed outcomes are the same, and when two values are equal: one test for the whole project.

Different deployments can replay to identical numbers (a knob that did not bind at this load): they are
legitimate trials, but no ranking, prune bar or finish may pretend that one beats the other. "The same"
allows the last digits of a float (`SAME_RELATIVE`), where the simulator's own summation order shows:
two values within it are equal wherever a value is compared for a tie or a leader (the search's prune bar,
the ranking's twins, the finish's leader, tie-break and P(best)). Costs keep their own, wider tolerance
(results/confidence.py: COST_TOLERANCE), since an average GPU count is a time integral, not a replayed sum.
"""

from __future__ import annotations

import math
from typing import Any

from spica_lib.replay.request import WALL_CLOCK_METRICS
from spica_lib.trial.spec import TrialResult

SAME_RELATIVE = 1e-9  # a relative difference below this is float noise, not a difference
# Metrics that say how the simulator ran, not what the deployment served.
NOT_AN_OUTCOME = WALL_CLOCK_METRICS | {"planner_total_ticks"}


def same_value(a: float, b: float) -> bool:
    """Whether two replayed values are equal up to float noise (`SAME_RELATIVE`)."""
    return math.isclose(a, b, rel_tol=SAME_RELATIVE, abs_tol=0.0)


def at_least(a: float, b: float) -> bool:
    """a >= b, with values equal up to float noise counted as equal."""
    return a > b or same_value(a, b)


def outcome(score: float | None, used_gpus: int, metrics: dict[str, float], workload_scores: dict[str, float]) -> list:
    """What a replay served, in a form `same_outcome` compares: score, GPUs, metrics and each workload's score."""
    served = {k: v for k, v in metrics.items() if k not in NOT_AN_OUTCOME}
    return [score, used_gpus, served, workload_scores]


def result_outcome(result: TrialResult) -> list:
    """A trial result's outcome, as `outcome` builds it."""
    parts = {name: part.score for name, part in (result.workloads or {}).items() if part.score is not None}
    return outcome(result.score, result.used_gpus, result.metrics, parts)


def same_outcome(a: Any, b: Any) -> bool:
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_outcome(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same_outcome(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) and isinstance(b, float):
        return same_value(a, b)
    return a == b


def first_same(outcomes: list[list]) -> list[int | None]:
    """Per outcome (in order), the 1-based position of the first earlier one that is the same, else None."""
    out: list[int | None] = []
    firsts: list[tuple[int, list]] = []
    for position, item in enumerate(outcomes, start=1):
        earlier = next((rank for rank, first in firsts if same_outcome(first, item)), None)
        if earlier is None:
            firsts.append((position, item))
        out.append(earlier)
    return out
