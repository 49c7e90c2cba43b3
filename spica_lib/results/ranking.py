"""Ranking scored candidates: best first for a scalar goal, the non-dominated front for a Pareto goal."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any
from pydantic import BaseModel, ConfigDict
from spica_lib.config import OptimizationTarget


def rank(candidates: Sequence[Candidate]) -> list[Candidate]:
    """Best first; equal scores go to the candidate with fewer GPUs (stable otherwise)."""
    return sorted(candidates, key=lambda c: (-c.score, c.used_gpus))


def dominates(a: dict[str, float], b: dict[str, float], objectives: Sequence[OptimizationTarget]) -> bool:
    """a is no worse than b on every objective and strictly better on one."""
    better = False
    for target in objectives:
        x, y = a.get(target.value, 0.0), b.get(target.value, 0.0)
        if not target.maximize:
            x, y = -x, -y
        if x < y:
            return False
        better = better or x > y
    return better


def pareto_front(candidates: Sequence[Candidate], objectives: Sequence[OptimizationTarget]) -> list[Candidate]:
    """Non-dominated candidates, sorted ascending along the last objective. Exact ties are all kept."""
    pool = [c for c in candidates if c.objectives is not None]
    front = [c for c in pool if not any(dominates(o.objectives, c.objectives, objectives) for o in pool if o is not c)]
    last = objectives[-1].value
    return sorted(front, key=lambda c: c.objectives.get(last, 0.0))
