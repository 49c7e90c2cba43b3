"""Ranking scored candidates: best first for a scalar goal, the non-dominated front for a Pareto goal."""

from __future__ import annotations

from collections.abc import Sequence

from spica_lib.config import OptimizationTarget
from spica_lib.trial.score import Candidate


def rank(candidates: Sequence[Candidate]) -> list[Candidate]:
    """Best first; equal scores go to the candidate with fewer GPUs (stable otherwise)."""
    return sorted(candidates, key=lambda c: (-c.score, c.used_gpus))


def pareto_front(candidates: Sequence[Candidate], objectives: Sequence[OptimizationTarget]) -> list[Candidate]:
    """Non-dominated candidates, sorted ascending along the last objective. Exact ties are all kept.

    Optimality is Vizier's (`pyvizier.multimetric`), on points signed so that higher is better.
    """
    import numpy as np
    from vizier.pyvizier import multimetric

    pool = [c for c in candidates if c.objectives is not None]
    if not pool:
        return []
    points = np.array([[_signed(c.objectives.get(t.value, 0.0), t) for t in objectives] for c in pool])
    optimal = multimetric.NaiveParetoOptimalAlgorithm().is_pareto_optimal(points)
    front = [c for c, keep in zip(pool, optimal, strict=True) if keep]
    last = objectives[-1].value
    return sorted(front, key=lambda c: c.objectives.get(last, 0.0))


def _signed(value: float, target: OptimizationTarget) -> float:
    return value if target.maximize else -value
