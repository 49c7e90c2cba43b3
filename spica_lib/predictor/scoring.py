"""Scoring one load forecaster on a trace: windows, the weighted log loss, one-step-ahead forecasts.

The trace is cut into windows of the scaling interval by Dynamo's planner's own trace aggregation,
and Dynamo's own predictor classes forecast each window's request count, mean input and mean
output length from the windows before it.
"""

from __future__ import annotations

import math
import time

from pydantic import BaseModel, ConfigDict

from spica_lib.base.dynamo_env import prepare_dynamo_import
from spica_lib.config.presets import CompositeEntry, load_predictor
from spica_lib.predictor.dynamo import Predictor, PredictorFactory, dynamo_predictor
from spica_lib.predictor.plan import PredictorJob, PresetScore
from spica_lib.predictor.warmup import warmup_windows


class Window(BaseModel):
    """Traffic of one interval: request count and mean input / output length (0 when empty)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    num_req: float
    isl: float
    osl: float


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
    prepare_dynamo_import()
    from dynamo.planner.offline.trace_data import extract_metrics_from_trace

    trace_seconds = max(1, round(interval_s * arrival_speedup_ratio))
    return [
        Window(num_req=float(m["request_count"]), isl=float(m["avg_isl"]), osl=float(m["avg_osl"]))
        for m in extract_metrics_from_trace(trace_path, trace_seconds)
    ]


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


def score_predictor_job(
    job: PredictorJob,
    trace_path: str,
    arrival_speedup_ratio: float,
    all_entries: list[CompositeEntry],
    factory: PredictorFactory = dynamo_predictor,
) -> PresetScore:
    """One (interval, candidate) of the plan scored on the trace, from the warm-up all of `all_entries` need."""
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
