"""The warm-up of a set of load predictors: the windows each needs before it forecasts, and the most among them.

The scoring starts every candidate's loss after them (predictor/scoring.py), and the plan warns of an interval
that leaves too few windows past them (predictor/plan.py).
"""

from __future__ import annotations

from spica_lib.config.presets import CompositeEntry, LoadPredictorSpec, load_predictor

# Windows each family needs before it forecasts: Dynamo's predictors' `minimum_data_points`
# (tests/test_load_predictor.py checks this table against the installed classes).
_FAMILY_MINIMUM = {"constant": 1, "arima": 5, "prophet": 5}


def minimum_windows(spec: LoadPredictorSpec) -> int:
    return spec.kalman_min_points if spec.load_predictor == "kalman" else _FAMILY_MINIMUM[spec.load_predictor]


def warmup_windows(entries: list[CompositeEntry]) -> int:
    """Windows every candidate needs before it forecasts: the largest minimum among them.

    Scoring every candidate from the same window keeps their losses comparable."""
    return max(minimum_windows(load_predictor(entry)) for entry in entries)
