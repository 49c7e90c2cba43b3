"""The load-predictor stage's plan and results: which (interval, candidate) pairs to score, and the winners.

For each throughput-scaling interval among the kept policies, every `load_predictor_candidates`
entry is scored on the workload's own trace (`spica_lib.predictor.scoring`); the lowest mean loss
wins. A synthetic workload is constant by construction, so `constant_last` wins without scoring;
no throughput-scaling policy means nothing to choose.
"""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from spica_lib.config import SmartSearchConfig
from spica_lib.config.presets import (
    CompositeEntry,
    predictor_label,
    throughput_intervals,
)
from spica_lib.predictor.warmup import warmup_windows

SCHEMA_VERSION = 1
FALLBACK = "constant_last"
Reason = Literal["no_throughput_scaling_candidate", "static_workload_constant", "swept"]


class PredictorJob(BaseModel):
    """One (interval, candidate) to score."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    interval: int
    label: str
    entry: CompositeEntry


class PredictorPlan(BaseModel):
    """What the stage will do, decided from the config alone (the workflow needs it at parse time)."""

    model_config = ConfigDict(extra="forbid")

    intervals: list[int]
    reason: Reason
    jobs: list[PredictorJob]


class PresetScore(BaseModel):
    """Artifact `load_predictor/scores/<interval>/<label>.json`: one candidate's loss at one interval."""

    model_config = ConfigDict(extra="forbid")

    schema_version: int = SCHEMA_VERSION
    interval: int
    label: str
    entry: CompositeEntry
    family: str
    log1p: bool
    loss: float | None  # None: no window could be scored (the loss is infinite)
    windows: int
    windows_scored: int
    warmup: int
    seconds: float


class LoadPredictorResult(BaseModel):
    """Artifact `load_predictor.json`: the winner per interval (seconds -> entry) and why."""

    model_config = ConfigDict(extra="forbid")

    schema_version: int = SCHEMA_VERSION
    reason: str
    best_by_interval: dict[int, CompositeEntry]
    losses: dict[int, dict[str, float | None]]

    def winners(self) -> dict[float, CompositeEntry]:
        """Winners keyed as `unroll_sample` looks them up."""
        return {float(interval): entry for interval, entry in self.best_by_interval.items()}


def plan_predictor_jobs(config: SmartSearchConfig, kept_policies: list[CompositeEntry]) -> PredictorPlan:
    intervals = [int(i) for i in throughput_intervals(kept_policies)]
    if not intervals:
        return PredictorPlan(intervals=[], reason="no_throughput_scaling_candidate", jobs=[])
    if config.workload.is_synthetic:
        return PredictorPlan(intervals=intervals, reason="static_workload_constant", jobs=[])
    entries = config.search_space.load_predictor_candidates
    jobs = [
        PredictorJob(interval=interval, label=predictor_label(entry, index), entry=entry)
        for interval in intervals
        for index, entry in enumerate(entries)
    ]
    return PredictorPlan(intervals=intervals, reason="swept", jobs=jobs)


# A predictor's loss averaged over fewer windows than this says little, and the stage has no winner with none.
MIN_SCORED_WINDOWS = 3


def window_warnings(config: SmartSearchConfig, kept_policies: list[CompositeEntry]) -> list[str]:
    """Warnings for each throughput interval that leaves the search part of the trace too few windows to score
    the load predictors on (they need warm-up windows first; warmup.warmup_windows), with the numbers."""
    from spica_lib.traces.scan import scan_trace

    plan = plan_predictor_jobs(config, kept_policies)
    if plan.reason != "swept":
        return []
    workload = config.workload
    span_s = scan_trace(workload.trace_path).duration_ms / 1000.0
    held = float(workload.holdout) if isinstance(workload.holdout, int | float) else 0.0
    searched_s = span_s * (1.0 - held) / float(workload.arrival_speedup_ratio)
    entries = config.search_space.load_predictor_candidates
    warmup = warmup_windows(entries)
    warnings = []
    for interval in plan.intervals:
        windows = max(1, math.ceil(searched_s / interval))
        scored = max(0, windows - warmup)
        if scored < MIN_SCORED_WINDOWS:
            part = f"the search part of the trace ({searched_s:.0f} s replayed" + (
                f", its last {held:g} held out)" if held else ")"
            )
            warnings.append(
                f"the load-predictor stage scores {len(entries)} predictor(s) at a {interval} s interval on {part}: "
                f"{windows} window(s), {warmup} of them warm-up, {scored} left to score (at least "
                f"{MIN_SCORED_WINDOWS} wanted; with none it picks no winner and falls back to {FALLBACK}); use a "
                "longer trace, a smaller holdout or a shorter throughput adjustment interval"
            )
    return warnings


def merge_scores(plan: PredictorPlan, scores: list[PresetScore]) -> tuple[LoadPredictorResult, list[dict[str, Any]]]:
    """Pick each interval's winner (lowest finite loss; the earlier candidate wins a tie)."""
    if plan.reason != "swept":
        best = {interval: FALLBACK for interval in plan.intervals}
        return LoadPredictorResult(reason=plan.reason, best_by_interval=best, losses={}), []
    best: dict[int, CompositeEntry] = {}
    losses: dict[int, dict[str, float | None]] = {}
    fallbacks = []
    rows = []
    order = {job.label: index for index, job in enumerate(plan.jobs)}
    for interval in plan.intervals:
        here = sorted((s for s in scores if s.interval == interval), key=lambda s: order[s.label])
        losses[interval] = {s.label: s.loss for s in here}
        finite = [s for s in here if s.loss is not None]
        winner = min(finite, key=lambda s: s.loss) if finite else None
        if winner is None:
            fallbacks.append(interval)
        best[interval] = winner.entry if winner else FALLBACK
        rows += [_row(s, s is winner) for s in here]
    reason = "swept" + (f"; no_winner_fallback_{FALLBACK}@{fallbacks}" if fallbacks else "")
    return LoadPredictorResult(reason=reason, best_by_interval=best, losses=losses), rows


def _row(score: PresetScore, winner: bool) -> dict[str, Any]:
    return {
        "interval": score.interval,
        "preset": score.label,
        "family": score.family,
        "log1p": score.log1p,
        "loss": math.inf if score.loss is None else score.loss,
        "windows": score.windows,
        "windows_scored": score.windows_scored,
        "warmup": score.warmup,
        "winner": winner,
        "seconds": score.seconds,
    }
