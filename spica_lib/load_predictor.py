"""Stage `load_predictor`: which load forecaster the Dynamo planner should run, per scaling interval.

For each throughput-scaling interval among the kept policies, every `load_predictor_candidates`
entry is scored on the workload's own trace: the trace is cut into windows of that interval (by
Dynamo's planner's own trace aggregation), and Dynamo's own predictor classes forecast each
window's request count, mean input and mean output length from the windows before it. The loss
is a weighted log error; the lowest mean loss wins. A synthetic workload is constant by
construction, so `constant_last` wins without scoring; no throughput-scaling policy means nothing
to choose.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from spica_lib.config import SmartSearchConfig
from spica_lib.presets import CompositeEntry, LoadPredictorSpec, load_predictor, predictor_label, throughput_intervals

SCHEMA_VERSION = 1
FALLBACK = "constant_last"
Reason = Literal["no_throughput_scaling_candidate", "static_workload_constant", "swept"]


class Window(BaseModel):
    """Traffic of one interval: request count and mean input / output length (0 when empty)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    num_req: float
    isl: float
    osl: float


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


def window_loss(predicted: Window, actual: Window) -> float:
    """Weighted log error: 0.4 on input tokens (count x isl), 0.4 on output tokens, 0.1 each on isl and osl.

    The count enters only through the token products, so predicting an empty window as empty costs 0.
    """

    def err(p: float, a: float) -> float:
        return abs(math.log1p(max(p, 0.0)) - math.log1p(max(a, 0.0)))

    return (
        0.4 * err(predicted.num_req * predicted.isl, actual.num_req * actual.isl)
        + 0.4 * err(predicted.num_req * predicted.osl, actual.num_req * actual.osl)
        + 0.1 * err(predicted.isl, actual.isl)
        + 0.1 * err(predicted.osl, actual.osl)
    )


def build_windows(trace_path: str, interval_s: int, arrival_speedup_ratio: float = 1.0) -> list[Window]:
    """The trace as the planner will see it: one window per interval of replayed time (sped-up
    arrivals compress the trace), from the first busy window to the last, empty windows kept."""
    from dynamo.planner.offline.trace_data import extract_metrics_from_trace

    trace_seconds = max(1, round(interval_s * arrival_speedup_ratio))
    return [
        Window(num_req=float(m["request_count"]), isl=float(m["avg_isl"]), osl=float(m["avg_osl"]))
        for m in extract_metrics_from_trace(trace_path, trace_seconds)
    ]


# Dynamo's predictor module imports the libraries of all four families at its top (pmdarima alone
# costs ~5 s), and the planner's trace aggregation pulls the planner core (sklearn, ~3 s). A scoring
# job runs one family in a fresh process, so it may replace what that family never touches.
_FAMILY_LIBRARIES: dict[str, dict[str, tuple[str, ...]]] = {
    "arima": {"pmdarima": ()},
    "prophet": {"prophet": ("Prophet",)},
    "kalman": {"filterpy": (), "filterpy.kalman": ("KalmanFilter",)},
}


class _Absent:
    """Stand-in for a library this process never uses; any use says so."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise ImportError("this scoring process loaded only its own predictor family's libraries")


def lean_imports(family: str) -> None:
    """Before Dynamo's planner is imported: skip the other families' libraries and planner internals.

    Only for a fresh process that scores one `family` (the scoring job); the predictor classes and
    trace aggregation used are still Dynamo's own. Does nothing if the planner is already loaded.
    """
    import importlib.util
    import sys
    import types

    if "dynamo.planner.core.load.predictors" in sys.modules:
        return
    for other, libraries in _FAMILY_LIBRARIES.items():
        if other == family:
            continue
        for name, attributes in libraries.items():
            if name in sys.modules:
                continue
            module = types.ModuleType(name)
            module.__path__ = []
            for attribute in attributes:
                setattr(module, attribute, _Absent)
            sys.modules[name] = module
    planner = os.path.dirname(importlib.util.find_spec("dynamo.planner").origin)
    core = os.path.join(planner, "core")
    # Bare packages: their __init__ (Kubernetes connectors, state machine, perf models) is not
    # needed to forecast load.
    bare = (
        ("dynamo.planner", planner),
        ("dynamo.planner.core", core),
        ("dynamo.planner.core.load", os.path.join(core, "load")),
    )
    for name, path in bare:
        if name not in sys.modules:
            package = types.ModuleType(name)
            package.__path__ = [path]
            sys.modules[name] = package


Predictor = Any  # a Dynamo planner predictor: add_data_point(x), predict_next(), get_last_value()
PredictorFactory = Callable[[LoadPredictorSpec, int], Predictor]


def dynamo_predictor(spec: LoadPredictorSpec, interval_s: int) -> Predictor:
    """Dynamo's own predictor for this spec, configured exactly as the planner would configure it."""
    os.environ.setdefault("DYN_LOG", "error")
    from dynamo.planner.config.planner_config import PlannerConfig
    from dynamo.planner.core.load.predictors import LOAD_PREDICTORS

    config = PlannerConfig(
        mode="agg",
        optimization_target="throughput",
        throughput_adjustment_interval_seconds=interval_s,
        report_interval_hours=None,
        live_dashboard_port=0,
        **spec.model_dump(),
    )
    return LOAD_PREDICTORS[spec.load_predictor](config)


# Windows each family needs before it forecasts: Dynamo's predictors' `minimum_data_points`
# (tests/test_load_predictor.py checks this table against the installed classes).
_FAMILY_MINIMUM = {"constant": 1, "arima": 5, "prophet": 5}


def minimum_windows(spec: LoadPredictorSpec) -> int:
    return spec.kalman_min_points if spec.load_predictor == "kalman" else _FAMILY_MINIMUM[spec.load_predictor]


def warmup_windows(entries: list[CompositeEntry]) -> int:
    """Windows every candidate needs before it forecasts: the largest minimum among them.

    Scoring every candidate from the same window keeps their losses comparable."""
    return max(minimum_windows(load_predictor(entry)) for entry in entries)


def score_candidate(
    windows: list[Window],
    entry: CompositeEntry,
    interval_s: int,
    warmup: int,
    factory: PredictorFactory = dynamo_predictor,
) -> tuple[float | None, int]:
    """Mean one-step-ahead loss over windows at or after `warmup` (None if none), and how many scored."""
    spec = load_predictor(entry)
    predictors = {field: factory(spec, interval_s) for field in ("num_req", "isl", "osl")}
    losses = []
    for index, actual in enumerate(windows):
        predicted = Window(**{field: _forecast(p) for field, p in predictors.items()})
        if index >= warmup:
            losses.append(window_loss(predicted, actual))
        for field, predictor in predictors.items():
            predictor.add_data_point(getattr(actual, field))
    return (sum(losses) / len(losses) if losses else None), len(losses)


def _forecast(predictor: Predictor) -> float:
    # A model that cannot fit yet (or fails on a flat series) falls back to the last value seen.
    try:
        value = float(predictor.predict_next())
    except Exception:
        return float(predictor.get_last_value())
    return value if math.isfinite(value) else float(predictor.get_last_value())


def run_job(
    job: PredictorJob,
    trace_path: str,
    arrival_speedup_ratio: float,
    all_entries: list[CompositeEntry],
    factory: PredictorFactory = dynamo_predictor,
) -> PresetScore:
    started = time.perf_counter()
    windows = build_windows(trace_path, job.interval, arrival_speedup_ratio)
    warmup = warmup_windows(all_entries)
    loss, scored = score_candidate(windows, job.entry, job.interval, warmup, factory)
    spec = load_predictor(job.entry)
    return PresetScore(
        interval=job.interval,
        label=job.label,
        entry=job.entry,
        family=spec.load_predictor,
        log1p=spec.load_predictor_log1p,
        loss=loss,
        windows=len(windows),
        windows_scored=scored,
        warmup=warmup,
        seconds=time.perf_counter() - started,
    )


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
