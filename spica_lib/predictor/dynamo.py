"""Dynamo's load predictors, imported lean: one family's libraries per scoring process."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from spica_lib.base.dynamo_env import prepare_dynamo_import
from spica_lib.config.presets import (
    LoadPredictorSpec,
)

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
    prepare_dynamo_import()
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
