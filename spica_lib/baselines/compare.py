"""How the winner compares with each baseline: "1.8x over aiconfigurator's pick"."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from spica_lib.baselines.model import Baseline
from spica_lib.config import OptimizationGoal


class BaselineRatio(BaseModel):
    """One baseline in the summary: its score and how many times better the winner is (None: not comparable)."""

    model_config = ConfigDict(extra="forbid")

    name: str
    label: str
    score: float | None
    ratio: float | None
    deployment: str | None
    note: str | None


def compare(goal: OptimizationGoal, winner_score: float | None, baselines: list[Baseline]) -> list[BaselineRatio]:
    return [_ratio(goal, winner_score, b) for b in baselines]


def _ratio(goal: OptimizationGoal, winner_score: float | None, baseline: Baseline) -> BaselineRatio:
    result = baseline.result
    score = result.score if result is not None and result.status == "feasible" else None
    note = baseline.note
    if result is not None and score is None:
        note = f"{result.status}: {result.reason}"
    ratio = None
    if score is not None and winner_score is not None:
        # Scores are signed so that higher is better; a minimised goal (cost, latency) is their negation.
        ours, theirs = (winner_score, score) if goal.target.maximize else (-score, -winner_score)
        if theirs > 0:
            ratio = ours / theirs
        else:
            note = f"it scores {score:g}: no ratio" + (f"; {note}" if note else "")
    return BaselineRatio(
        name=baseline.name, label=baseline.label, score=score, ratio=ratio, deployment=baseline.deployment, note=note
    )


def ratio_text(item: BaselineRatio) -> str:
    shown = f"{item.ratio:.2f}x" if item.ratio is not None else "n/a"
    return f"{shown} over {item.label}"
