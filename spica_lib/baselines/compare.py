"""How the winner compares with each baseline: "1.8x over aiconfigurator's pick"."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from spica_lib.baselines.model import Baseline
from spica_lib.config import OptimizationGoal
from spica_lib.trial.score import COST_PER_MILLION, score_text

GOODPUT = "goodput_output_throughput_tok_s"


class BaselineRatio(BaseModel):
    """One baseline in the summary: its score and how many times better the winner is (None: not comparable)."""

    model_config = ConfigDict(extra="forbid")

    name: str
    label: str
    score: float | None
    ratio: float | None
    deployment: str | None
    note: str | None
    # What the ratio is made of, in absolute terms: the target's own value with its unit, the GPUs
    # provisioned, the goodput served and (with goal.gpu_hour_usd) the cost per million output tokens.
    score_text: str | None = None
    gpus: int | None = None
    goodput_tok_s: float | None = None
    cost_per_million_usd: float | None = None


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
    metrics = result.metrics if result is not None and score is not None else {}
    return BaselineRatio(
        name=baseline.name, label=baseline.label, score=score, ratio=ratio, deployment=baseline.deployment, note=note,
        score_text=score_text(score, goal.target, name=False) if score is not None else None,
        gpus=result.used_gpus if result is not None and score is not None else None,
        goodput_tok_s=metrics.get(GOODPUT), cost_per_million_usd=metrics.get(COST_PER_MILLION),
    )  # fmt: skip


def ratio_text(item: BaselineRatio, goal: OptimizationGoal) -> str:
    """How the winner compares with one baseline on the search's traffic sample, in words a reader can act on:
    a ratio for a maximised target ("the winner scores 1.80x aiconfigurator's pick"), a percentage for a
    minimised one ("the winner is 12 % faster than ..."), and why there is no comparison otherwise."""
    absolute = f" ({absolute_text(item)})" if item.score_text else ""
    if item.ratio is None:
        if _misses_sla(item):
            return f"{item.label} misses the SLA: {(item.note or '').removeprefix('infeasible: ')}"
        return f"{item.label}: no comparison ({item.note or 'no score'})"
    if item.note and item.note.startswith("the winner itself"):
        return f"{item.label} is the winner itself ({item.note.removeprefix('the winner itself ')})"
    if goal.target.maximize:
        return f"the winner scores {item.ratio:.2f}x {item.label}{absolute}"
    change = _change(item, goal)
    if change.startswith("as good"):
        return f"the winner is as good as {item.label} (within 0.5 %){absolute}"
    return f"the winner is {change} than {item.label}{absolute}"


def comparison_cell(item: BaselineRatio, goal: OptimizationGoal) -> str:
    """The winner against a baseline in a table cell: "2.10×", "12 % faster", "misses the SLA" or "—"."""
    if item.ratio is None:
        return "misses the SLA" if _misses_sla(item) else "—"
    return f"{item.ratio:.2f}×" if goal.target.maximize else _change(item, goal)


def _misses_sla(item: BaselineRatio) -> bool:
    return item.score is None and (item.note or "").startswith("infeasible")


def _change(item: BaselineRatio, goal: OptimizationGoal) -> str:
    """A minimised target's comparison as a share: "12 % faster", "3 % more expensive" (within 0.5 %: "as good")."""
    # ratio is the baseline's value over the winner's for a minimised target (see _ratio).
    change = 1.0 - 1.0 / item.ratio
    if abs(change) < 0.005:
        return "as good (within 0.5 %)"
    less, more = MINIMISED_WORDS.get(goal.target.value, ("lower", "higher"))
    return f"{100 * abs(change):.0f} % {less if change > 0 else more}"


# What "less" and "more" mean for each minimised target, in the summary's words.
MINIMISED_WORDS = {"e2e_latency": ("faster", "slower"), "cost_per_million_output_tokens": ("cheaper", "more expensive")}


def absolute_text(item: BaselineRatio) -> str:
    """The baseline in absolute terms: `246.4 tok/s/GPU, 1971 tok/s goodput on 8 GPUs, US$ 0.41/1M tokens`."""
    parts = [item.score_text or ""]
    if item.goodput_tok_s is not None:
        parts.append(f"{item.goodput_tok_s:.0f} tok/s goodput on {item.gpus} GPUs")
    elif item.gpus is not None:
        parts.append(f"on {item.gpus} GPUs")
    if item.cost_per_million_usd is not None:
        parts.append(f"US$ {item.cost_per_million_usd:.3g}/1M output tokens")
    return ", ".join(part for part in parts if part)
