"""Step-time calibration: how much slower or faster than the perf DB a (system, backend) really steps.

The replay times every prefill and decode step from aiconfigurator's perf DB. `spica fidelity --fit`
compares replays with measured silicon and fits one multiplier per (system, backend) for the
prefill step time and one for the decode step time, and the same per (system, backend, model) for
the models measured there; a model with its own scales uses them. A config opts in with `calibration: FILE`; the
replay then applies them through the mocker's own speed-up ratios (`speedup_ratio` divides every
step time, `decode_speedup_ratio` divides decode steps once more), so a scale of 1.2 makes each
step 20 % slower.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

SCHEMA_VERSION = 1


class StepScale(BaseModel):
    """Multipliers on one (system, backend)'s step times, for one model or (None) any, and how many rows fitted them."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    system: str
    backend: str
    model: str | None = None
    prefill: float = Field(gt=0)
    decode: float = Field(gt=0)
    fit_rows: int = Field(ge=1)
    # The deployment modes of the fitting rows. In a disagg row the prefill scale is fitted on TTFT, the
    # prefill workers' signal, and the decode scale on TPOT, the decode workers'.
    modes: list[str] = Field(default_factory=list)
    # A fixed cost every request's TTFT carries beyond the prefill steps (the frontend, tokenisation, scheduling,
    # the network): 0 for a scale-only fit ("scale"); fitted with the prefill scale by the affine fit ("affine").
    ttft_overhead_ms: float = Field(default=0.0, ge=0)
    # "none": the cross-validation kept no correction (both scales 1); "scale" and "affine" as above.
    fit: Literal["none", "scale", "affine"] = "scale"


class HeldOutError(BaseModel):
    """The replay's error on the held-out rows of one (system, backend, model), in percent (MAPE), without and
    with the scales a sweep would use for them (the model's own, else its system's), and the step-time error
    left after calibration: the MAPE of TTFT (prefill steps) and of TPOT (decode steps), calibrated."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    system: str
    backend: str
    model: str
    rows: int = Field(ge=1)
    uncalibrated: dict[str, float]  # ttft_ms, tpot_ms, tokens_per_second_per_gpu -> MAPE
    calibrated: dict[str, float]
    # The other fit's MAPE on the same rows, for the side by side (the file keeps the better: `fit` of its scale).
    other_fit: dict[str, float] = Field(default_factory=dict)
    # How much slower silicon was than the calibrated prediction in 9 rows of 10: the 90th percentile of
    # measured / predicted - 1 (ttft_ms, tpot_ms), a fraction; what `goal.sla_safety: measured` tightens by.
    under_p90: dict[str, float] = Field(default_factory=dict)

    @property
    def step_error(self) -> float:
        """The larger of the calibrated TTFT and TPOT MAPE, as a fraction: the step-time band it measures."""
        return max(self.calibrated["ttft_ms"], self.calibrated["tpot_ms"]) / 100.0


class BandError(BaseModel):
    """The held-out rows of one (system, backend, model) in one band of concurrency or ISL (fidelity/bands.py):
    how many, and their MAPE in percent (ttft_ms, tpot_ms) without and with the calibration a sweep would use."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    system: str
    backend: str
    model: str
    kind: Literal["concurrency", "isl"]
    low: int = Field(ge=1)
    high: int | None = None  # None: open above
    rows: int = Field(ge=1)
    uncalibrated: dict[str, float]
    calibrated: dict[str, float]

    def holds(self, value: float) -> bool:
        return self.low <= value and (self.high is None or value < self.high + 1)


class CandidateError(BaseModel):
    """One (replay protocol, correction) judged by cross-validation within a group's fitting half: its MAPE in
    percent per metric (ttft_ms, tpot_ms, tokens_per_second_per_gpu), and whether it may be kept (its TPOT and
    tokens/s/GPU errors not worse than the uncorrected default protocol's on the same rows: fidelity/choice.py)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    protocol: str
    correction: str  # of TTFT: none | scale | affine | parts
    decode_scaled: bool = False  # with a decode step-time scale (else TPOT as replayed)
    cv: dict[str, float]
    admissible: bool
    # The fitting rows replayed with the fitted correction's scales (in sample), MAPE per metric, where the choice
    # replayed them: a prefill scale also slows the decode steps that share a step with prefill chunks, which the
    # post-hoc cross-validation cannot see (fidelity/choice.py). `replay_admissible`: not worse than the uncorrected
    # default protocol there on TPOT and tokens/s/GPU, nor by more than a point on TTFT.
    fitting_replay: dict[str, float] = Field(default_factory=dict)
    replay_admissible: bool | None = None


class GroupChoice(BaseModel):
    """What `spica fidelity --fit` chose for one (system, backend, model) (model None: every model of the system),
    by cross-validation within the fitting half (fidelity/choice.py): the replay protocol and the correction a
    sweep applies through the replay (`applied`: its scales are this file's StepScale for the group), and where a
    correction only a post-hoc prediction can make did better, that one (`report_only`, with its parameters), which
    no sweep applies."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    system: str
    backend: str
    model: str | None = None
    fitting_rows: int = Field(ge=1)
    protocol: str
    applied: str  # of TTFT: none | scale | affine
    decode_scaled: bool = False  # the applied correction scales decode steps too
    report_only: str | None = None  # e.g. "parts": measured TTFT = a x queue + b x admit-to-first-token + cost
    report_only_protocol: str | None = None
    report_only_parameters: dict[str, float] = Field(default_factory=dict)
    candidates: list[CandidateError] = Field(default_factory=list)


class CrossValidated(BaseModel):
    """A prior's verdict for one (system, backend): its error on each measured model when fitted on the others,
    against no correction on the same rows (MAPE, percent), and whether it is kept (fidelity/prior.py)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    system: str
    backend: str
    models: list[str]
    rows: int
    uncorrected: dict[str, float]  # ttft_ms, tpot_ms, tokens_per_second_per_gpu -> MAPE
    prior: dict[str, float]
    helps: bool
    under_p90: dict[str, float] = Field(default_factory=dict)  # of the cross-validated predictions

    def text(self) -> str:
        words = {"ttft_ms": "TTFT", "tpot_ms": "TPOT", "tokens_per_second_per_gpu": "tok/s/GPU"}
        errors = ", ".join(f"{words[m]} {self.uncorrected[m]:.0f} % -> {self.prior[m]:.0f} %" for m in words)
        return (f"{self.system} / {self.backend}: left-one-model-out over {len(self.models)} models, {self.rows} rows: "
                f"{errors} (MAPE)")  # fmt: skip


class CalibrationFile(BaseModel):
    """Artifact written by `spica fidelity --fit`: the scales, where they come from and how they were fitted."""

    model_config = ConfigDict(extra="forbid")

    schema_version: int = SCHEMA_VERSION
    source: str  # the measured rows: file and package version
    split: str  # which rows fitted the scales (the others are held out to judge them)
    protocol: str | None = None  # the replay protocol the rows were replayed by (fidelity/protocol.py; None: before it)
    scales: list[StepScale]
    held_out: list[HeldOutError] = Field(default_factory=list)  # empty: no held-out row was replayed
    # A prior's verdicts (config/calibration/prior.json): every (system, backend) judged, kept or not.
    cross_validated: list[CrossValidated] = Field(default_factory=list)
    versions: dict[str, str] = Field(default_factory=dict)
    # What the fit chose per group by cross-validation within the fitting half (empty: a file written before).
    choices: list[GroupChoice] = Field(default_factory=list)
    bands: list[BandError] = Field(default_factory=list)  # held-out errors per concurrency and ISL band

    def bands_for(self, system: str, backend: str, model: str, kind: str = "concurrency") -> list[BandError]:
        return [b for b in self.bands if (b.system, b.backend, b.model, b.kind) == (system, backend, model, kind)]

    def verdict_for(self, system: str, backend: str) -> CrossValidated | None:
        return next((v for v in self.cross_validated if (v.system, v.backend) == (system, backend)), None)

    def held_out_for(self, system: str, backend: str, model: str) -> HeldOutError | None:
        return next((h for h in self.held_out if (h.system, h.backend, h.model) == (system, backend, model)), None)

    def scale_for(self, system: str, backend: str, model: str | None = None) -> StepScale | None:
        """The model's own scales when the file has them, else those fitted over every model of the system."""
        matches = [s for s in self.scales if (s.system, s.backend) == (system, backend) and s.model in (model, None)]
        return min(matches, key=lambda s: s.model is None, default=None)


def read_calibration(path: str | Path) -> CalibrationFile:
    """A calibration file, JSON or (by its .yaml / .yml name) YAML."""
    text = Path(path).read_text(encoding="utf-8")
    if Path(path).suffix in (".yaml", ".yml"):
        import yaml

        return CalibrationFile.model_validate(yaml.safe_load(text))
    return CalibrationFile.model_validate_json(text)


def write_calibration(path: str | Path, calibration: CalibrationFile) -> None:
    """Write it atomically, as YAML when the name ends .yaml / .yml, else as JSON."""
    from spica_lib.base.artifacts import atomic_write_text, write_model

    if Path(path).suffix in (".yaml", ".yml"):
        import yaml

        atomic_write_text(path, yaml.safe_dump(calibration.model_dump(mode="json"), sort_keys=False))
    else:
        write_model(path, calibration)


def speedup_ratios(prefill: float, decode: float) -> dict[str, float]:
    """The mocker's engine arguments that multiply prefill step times by `prefill` and decode steps by `decode`."""
    return {"speedup_ratio": 1.0 / prefill, "decode_speedup_ratio": prefill / decode}
