"""Composite knobs: the named presets and the self-contained dict entries that may replace them.

A composite knob (planner scaling policy, FPM sampling, load sensitivity, load-predictor candidate)
is a list whose entries are either a preset id or a dict holding every field of that composite.
This module owns the preset tables and the decoding of an entry into its typed fields; it is pure
(no files, no Dynamo) so config validation, the policy filter and the sample unroll share it.
"""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

CompositeEntry = str | dict[str, Any]


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class ScalingPolicy(_Frozen):
    """What a `planner_scaling_policy` entry turns on. Both flags off means the planner is off."""

    enable_throughput_scaling: bool = False
    enable_load_scaling: bool = False
    # Whole seconds: the Dynamo planner's intervals are integers.
    throughput_adjustment_interval_seconds: int | None = Field(default=None, gt=0)
    load_adjustment_interval_seconds: int | None = Field(default=None, gt=0)

    @property
    def scales(self) -> bool:
        return self.enable_throughput_scaling or self.enable_load_scaling

    @model_validator(mode="after")
    def _interval_for_each_enabled_mode(self) -> ScalingPolicy:
        # An enabled scaling mode without its interval would only fail inside the planner, mid-sweep.
        for mode in ("throughput", "load"):
            interval = f"{mode}_adjustment_interval_seconds"
            if getattr(self, f"enable_{mode}_scaling") and getattr(self, interval) is None:
                raise ValueError(f"enable_{mode}_scaling is true, so {interval} must be a number of seconds > 0")
        return self


class FpmSampling(_Frozen):
    """How many forward-pass-metric samples the planner keeps, and their bucket size."""

    max_num_fpm_samples: int = Field(ge=1)
    fpm_sample_bucket_size: int = Field(ge=1)

    @field_validator("fpm_sample_bucket_size")
    @classmethod
    def _perfect_square(cls, value: int) -> int:
        # The planner lays the buckets out on a square grid; a non-square size fails there, late.
        # Dynamo's PlannerConfig checks the same (replay.plan uses it per trial), but importing the
        # planner costs ~1 s, too much for a check that runs at every Snakemake start.
        if math.isqrt(value) ** 2 != value:
            raise ValueError(f"must be a perfect square (1, 4, 9, 16, ...), got {value}")
        return value


class LoadSensitivity(_Frozen):
    """How eagerly load-based scaling gives GPUs back."""

    load_scaling_down_sensitivity: float = Field(ge=0, le=100)
    load_min_observations: int = Field(ge=1)


PredictorFamily = Literal["constant", "arima", "prophet", "kalman"]
PREDICTOR_FAMILIES: tuple[str, ...] = ("constant", "arima", "prophet", "kalman")


class LoadPredictorSpec(_Frozen):
    """A load forecaster for the planner: family, log1p transform and the family's own knobs."""

    load_predictor: PredictorFamily
    load_predictor_log1p: bool = False
    prophet_window_size: int = Field(default=50, ge=2)
    kalman_q_level: float = Field(default=1.0, gt=0)
    kalman_q_trend: float = Field(default=0.1, ge=0)
    kalman_r: float = Field(default=10.0, gt=0)
    kalman_min_points: int = Field(default=5, ge=1)

    def fields(self) -> dict[str, Any]:
        """The sample fields this forecaster contributes (only its own family's knobs)."""
        out: dict[str, Any] = {
            "load_predictor": self.load_predictor,
            "load_predictor_log1p": self.load_predictor_log1p,
        }
        if self.load_predictor == "prophet":
            out["prophet_window_size"] = self.prophet_window_size
        elif self.load_predictor == "kalman":
            out.update(
                kalman_q_level=self.kalman_q_level,
                kalman_q_trend=self.kalman_q_trend,
                kalman_r=self.kalman_r,
                kalman_min_points=self.kalman_min_points,
            )
        return out


def _policy(tput: bool, load: bool, tput_s: int | None, load_s: int | None) -> ScalingPolicy:
    return ScalingPolicy(
        enable_throughput_scaling=tput,
        enable_load_scaling=load,
        throughput_adjustment_interval_seconds=tput_s,
        load_adjustment_interval_seconds=load_s,
    )


SCALING_POLICY_PRESETS: dict[str, ScalingPolicy] = {
    "disabled": _policy(False, False, None, None),
    "throughput_180_5": _policy(True, False, 180, 5),
    "throughput_600_5": _policy(True, False, 600, 5),
    "load_180_5": _policy(False, True, 180, 5),
    "load_180_10": _policy(False, True, 180, 10),
    "hybrid_180_5": _policy(True, True, 180, 5),
    "hybrid_600_5": _policy(True, True, 600, 5),
}

FPM_SAMPLING_PRESETS: dict[str, FpmSampling] = {
    "small": FpmSampling(max_num_fpm_samples=32, fpm_sample_bucket_size=4),
    "default": FpmSampling(max_num_fpm_samples=64, fpm_sample_bucket_size=16),
    "large": FpmSampling(max_num_fpm_samples=128, fpm_sample_bucket_size=16),
    "fine": FpmSampling(max_num_fpm_samples=128, fpm_sample_bucket_size=64),
}

LOAD_SENSITIVITY_PRESETS: dict[str, LoadSensitivity] = {
    "aggressive": LoadSensitivity(load_scaling_down_sensitivity=70, load_min_observations=3),
    "default": LoadSensitivity(load_scaling_down_sensitivity=80, load_min_observations=5),
    "conservative": LoadSensitivity(load_scaling_down_sensitivity=90, load_min_observations=8),
}


def _kalman(log1p: bool, q_level: float, q_trend: float, r: float, min_points: int) -> LoadPredictorSpec:
    return LoadPredictorSpec(
        load_predictor="kalman",
        load_predictor_log1p=log1p,
        kalman_q_level=q_level,
        kalman_q_trend=q_trend,
        kalman_r=r,
        kalman_min_points=min_points,
    )


LOAD_PREDICTOR_PRESETS: dict[str, LoadPredictorSpec] = {
    "constant_last": LoadPredictorSpec(load_predictor="constant"),
    "arima_raw": LoadPredictorSpec(load_predictor="arima"),
    "arima_log1p": LoadPredictorSpec(load_predictor="arima", load_predictor_log1p=True),
    "prophet_w20_raw": LoadPredictorSpec(load_predictor="prophet", prophet_window_size=20),
    "prophet_w20_log1p": LoadPredictorSpec(load_predictor="prophet", load_predictor_log1p=True, prophet_window_size=20),
    "prophet_w50_raw": LoadPredictorSpec(load_predictor="prophet", prophet_window_size=50),
    "prophet_w50_log1p": LoadPredictorSpec(load_predictor="prophet", load_predictor_log1p=True, prophet_window_size=50),
    "kalman_default_raw": _kalman(False, 1.0, 0.1, 10.0, 5),
    "kalman_default_log1p": _kalman(True, 1.0, 0.1, 10.0, 5),
    "kalman_reactive_raw": _kalman(False, 10.0, 1.0, 5.0, 3),
    "kalman_reactive_log1p": _kalman(True, 10.0, 1.0, 5.0, 3),
}


class CompositeKnob(_Frozen):
    """One composite knob: its presets, the model a dict entry must satisfy, and required dict keys."""

    name: str
    presets: dict[str, Any]
    entry_model: type[BaseModel]
    required_keys: tuple[str, ...]

    @property
    def allowed_keys(self) -> tuple[str, ...]:
        return tuple(self.entry_model.model_fields)

    def decode(self, entry: CompositeEntry) -> Any:
        """Preset id or self-contained dict -> the typed composite. A dict replaces, never merges."""
        if isinstance(entry, str):
            return self.presets[entry]
        return self.entry_model.model_validate(entry)


def _knob(name: str, presets: dict[str, Any], model: type[BaseModel], required: tuple[str, ...] = ()) -> CompositeKnob:
    # Most composites need every field in a dict entry; a predictor dict needs only its family.
    required = required or tuple(model.model_fields)
    return CompositeKnob(name=name, presets=presets, entry_model=model, required_keys=required)


COMPOSITE_KNOBS: dict[str, CompositeKnob] = {
    knob.name: knob
    for knob in (
        _knob("planner_scaling_policy", SCALING_POLICY_PRESETS, ScalingPolicy),
        _knob("planner_fpm_sampling", FPM_SAMPLING_PRESETS, FpmSampling),
        _knob("planner_load_sensitivity", LOAD_SENSITIVITY_PRESETS, LoadSensitivity),
        _knob("load_predictor_candidates", LOAD_PREDICTOR_PRESETS, LoadPredictorSpec, ("load_predictor",)),
    )
}


def scaling_policy(entry: CompositeEntry) -> ScalingPolicy:
    return COMPOSITE_KNOBS["planner_scaling_policy"].decode(entry)


def fpm_sampling(entry: CompositeEntry) -> FpmSampling:
    return COMPOSITE_KNOBS["planner_fpm_sampling"].decode(entry)


def load_sensitivity(entry: CompositeEntry) -> LoadSensitivity:
    return COMPOSITE_KNOBS["planner_load_sensitivity"].decode(entry)


def load_predictor(entry: CompositeEntry) -> LoadPredictorSpec:
    return COMPOSITE_KNOBS["load_predictor_candidates"].decode(entry)


def predictor_label(entry: CompositeEntry, index: int) -> str:
    """Name used in diagnostics: the preset id, or `custom_<index>` for a dict entry."""
    return entry if isinstance(entry, str) else f"custom_{index}"


def policy_label(entry: CompositeEntry) -> str:
    """Readable name of a scaling-policy entry for messages and reports."""
    if isinstance(entry, str):
        return entry
    return "{" + ", ".join(f"{k}: {v}" for k, v in entry.items()) + "}"


def throughput_intervals(policies: list[CompositeEntry]) -> list[float]:
    """Distinct throughput-scaling intervals, ascending, among entries that scale on throughput."""
    found = set()
    for entry in policies:
        policy = scaling_policy(entry)
        if policy.enable_throughput_scaling and policy.throughput_adjustment_interval_seconds is not None:
            found.add(policy.throughput_adjustment_interval_seconds)
    return sorted(found)
