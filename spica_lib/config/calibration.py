"""`calibration`: opt-in step-time scales (a file written by `spica fidelity --fit`), applied to every replay.

Written as a path (relative to the config file's folder); read once when the config is read, and
the scales for the config's hardware and each of its backends are kept in the normalised config,
so the run's hash, manifest and every trial file carry them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_serializer, model_validator

from spica_lib.base.since import without_defaults
from spica_lib.facts.calibration import read_calibration

MIN_BAND_ROWS = 5  # held-out rows needed before their error, not the default, sets the stress band
OFF = "none"  # `calibration: none`: no correction at all, the prior included
# The shipped prior (bench/fidelity_prior.py writes it): per (system, backend), kept only where it helps.
PRIOR_FILE = Path(__file__).resolve().parents[2] / "config" / "calibration" / "prior.json"


class LoadBand(BaseModel):
    """The held-out error of the config's model in one concurrency band (fidelity/bands.py), in percent (MAPE)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    low: int = Field(ge=1)
    high: int | None = None  # None: open above
    rows: int = Field(ge=1)
    ttft_mape: float = Field(ge=0)
    tpot_mape: float = Field(ge=0)
    uncalibrated_ttft_mape: float = Field(ge=0)
    uncalibrated_tpot_mape: float = Field(ge=0)

    def label(self) -> str:
        return f"{self.low}+" if self.high is None else f"{self.low}–{self.high}"


class HeldOut(BaseModel):
    """The calibration's measured error on held-out rows of the config's model (fidelity `--fit`), in percent."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    rows: int = Field(ge=1)
    ttft_mape: float = Field(ge=0)  # calibrated: the prefill steps' error left
    tpot_mape: float = Field(ge=0)  # calibrated: the decode steps' error left
    uncalibrated_ttft_mape: float = Field(ge=0)
    uncalibrated_tpot_mape: float = Field(ge=0)
    # The 90th percentile of measured / predicted - 1 on those rows, as fractions (None: not measured; files
    # written before it): what `goal.sla_safety: measured` tightens the TTFT and ITL bounds by.
    ttft_under_p90: float | None = None
    tpot_under_p90: float | None = None
    # Per concurrency band of the held-out rows (a file written by `--fit` since issue 71; empty before).
    load_bands: list[LoadBand] = Field(default_factory=list)

    @model_serializer(mode="wrap")
    def _without_unset_quantiles(self, handler: Any) -> dict[str, Any]:
        # A calibration read before quantiles (or bands) were measured hashes as it did.
        return without_defaults(handler(self), self, ttft_under_p90=None, tpot_under_p90=None, load_bands=[])

    def band_for(self, load: float) -> LoadBand | None:
        """The band holding `load` requests in flight per engine (a load under 1 is the first band's)."""
        load = max(1.0, load)
        return next((b for b in self.load_bands if b.low <= load and (b.high is None or load < b.high + 1)), None)

    @property
    def step_error(self) -> float:
        """The larger calibrated TTFT / TPOT MAPE, as a fraction (a step-time band: docs/fidelity/calibration.md)."""
        return max(self.ttft_mape, self.tpot_mape) / 100.0


class BackendScale(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    prefill: float = Field(gt=0)
    decode: float = Field(gt=0)
    fitted_on: str  # "Qwen/Qwen3-32B" (the model's own rows) or "every model" of the system
    held_out: HeldOut | None = None  # None: the file holds no held-out rows of this model on this system
    # The per-request fixed cost on TTFT of an affine fit (replay/sla_adjust.py); 0: a scale-only fit.
    ttft_overhead_ms: float = Field(default=0.0, ge=0)

    @model_serializer(mode="wrap")
    def _without_unset_held_out(self, handler: Any) -> dict[str, Any]:
        # A file without held-out errors or an overhead hashes as it did before they existed.
        return without_defaults(handler(self), self, held_out=None, ttft_overhead_ms=0)


class Calibration(BaseModel):
    """The calibration file and, once read, its source and the scales of each backend on the config's hardware.

    `calibration: none` turns every correction off, the prior included (the file `none`, no scales). Left out, a
    sweep on one GPU type takes the prior (`prior_calibration`) for the backends where it was kept.
    """

    model_config = ConfigDict(extra="forbid")

    file: str
    source: str | None = None
    scales: dict[str, BackendScale] = Field(default_factory=dict)
    prior: bool = False  # the shipped prior, applied because the config named no calibration

    @model_serializer(mode="wrap")
    def _without_unset_prior(self, handler: Any) -> dict[str, Any]:
        return without_defaults(handler(self), self, prior=False)  # a user's calibration hashes as before priors

    @property
    def off(self) -> bool:
        return self.file == OFF

    @model_validator(mode="before")
    @classmethod
    def _from_path(cls, data: Any) -> Any:
        return {"file": data} if isinstance(data, str) else data

    def measured_band(self) -> tuple[float, str] | None:
        """The stress band measured by the held-out rows, and where it came from; None where fewer than
        MIN_BAND_ROWS held-out rows of the config's model measured it for some backend.

        In a closed loop TTFT follows the prefill step time and TPOT the decode step time (the fit's premise),
        so the calibrated held-out MAPE of TTFT is read as the prefill steps' error and that of TPOT as the
        decode steps'. The band is the larger over both roles and every backend, bounded to [1 %, 90 %]."""
        held = {backend: s.held_out for backend, s in self.scales.items()}
        if not held or any(h is None or h.rows < MIN_BAND_ROWS for h in held.values()):
            return None
        backend, worst = max(((b, h) for b, h in held.items() if h is not None), key=lambda item: item[1].step_error)
        band = min(0.9, max(0.01, worst.step_error))
        role = "prefill (TTFT)" if worst.ttft_mape >= worst.tpot_mape else "decode (TPOT)"
        return band, (f"the calibration's measured held-out step-time error: {role} {100 * worst.step_error:.0f} % "
                      f"MAPE on {worst.rows} held-out {backend} rows ({Path(self.file).name})")  # fmt: skip

    def measured_role_bands(self) -> dict[str, float] | None:
        """The stress band of each role, where `measured_band` has one: prefill from the held-out TTFT error, decode
        from the TPOT error, each the larger over the backends, bounded to [1 %, 90 %]."""
        if self.measured_band() is None:
            return None
        held = [s.held_out for s in self.scales.values() if s.held_out is not None]
        bound = lambda value: min(0.9, max(0.01, value / 100.0))  # noqa: E731
        return {"prefill": bound(max(h.ttft_mape for h in held)), "decode": bound(max(h.tpot_mape for h in held))}

    def measured_sla_error(self) -> float | None:
        """How much slower than predicted silicon was in 9 held-out rows of 10, TTFT or TPOT, the larger over the
        backends, as a fraction (None: not measured). An SLA margin smaller than it is within the error."""
        found = [max(h.ttft_under_p90 or 0.0, h.tpot_under_p90 or 0.0) for s in self.scales.values()
                 if (h := s.held_out) is not None and h.ttft_under_p90 is not None]  # fmt: skip
        return max(found) if found else None

    def why_no_band(self) -> str:
        """Why the held-out rows set no stress band (see measured_band)."""
        for backend, s in self.scales.items():
            if s.held_out is None:
                return f"the calibration holds no held-out error of this model's {backend} rows on this system"
            if s.held_out.rows < MIN_BAND_ROWS:
                return f"{s.held_out.rows} held-out {backend} rows, fewer than the {MIN_BAND_ROWS} a measured band needs"
        return "no backend has scales"

    def describe(self) -> str:
        """One line per backend: the scales, what they were fitted on, and their measured held-out error."""
        lines = []
        for backend, s in self.scales.items():
            line = f"{backend}: prefill x{s.prefill:.3g}, decode x{s.decode:.3g}"
            line += f", +{s.ttft_overhead_ms:.0f} ms per request's TTFT" if s.ttft_overhead_ms else ""
            line += f" (fitted on {s.fitted_on})"
            h = s.held_out
            if h is None:
                line += "; no held-out error measured for this model"
            else:
                line += (f"; held-out error on {h.rows} rows: TTFT {h.uncalibrated_ttft_mape:.0f} % -> "
                         f"{h.ttft_mape:.0f} %, TPOT {h.uncalibrated_tpot_mape:.0f} % -> {h.tpot_mape:.0f} % (MAPE)")  # fmt: skip
            lines.append(line)
        return "; ".join(lines)


def resolve_calibration(
    calibration: Calibration, sku: str, model: str, backends: list[str], base_dir: str
) -> Calibration:
    """Read the file (unless its scales are already here, as in a normalised config) for `sku`, `model`, `backends`.

    Raises ValueError naming the file and what is missing: a scale missing for a backend would
    leave it uncalibrated without a word.
    """
    if calibration.off or calibration.prior:
        return calibration  # nothing to read (off), or the prior already read for its backends
    if calibration.scales:
        missing = sorted(set(backends) - set(calibration.scales))
        if missing:
            raise ValueError(f"calibration has no scales for backend(s) {missing}")
        return calibration
    path = Path(calibration.file).expanduser()
    resolved = (path if path.is_absolute() else Path(base_dir) / path).resolve()
    if not resolved.is_file():
        raise ValueError(
            f"calibration file {calibration.file!r} does not exist (looked for {resolved}); write one with "
            "`spica fidelity --fit FILE`; a relative path is read relative to the config file's folder"
        )
    try:
        found = read_calibration(resolved)
    except ValueError as exc:
        raise ValueError(f"{resolved} is not a calibration file written by `spica fidelity --fit`: {exc}") from None
    scales, missing = {}, []
    for backend in backends:
        scale = found.scale_for(sku, backend, model)
        if scale is None:
            missing.append(backend)
        else:
            fitted_on = scale.model or "every model"
            error = found.held_out_for(sku, backend, model)
            bands = [LoadBand(low=b.low, high=b.high, rows=b.rows, ttft_mape=b.calibrated["ttft_ms"],
                              tpot_mape=b.calibrated["tpot_ms"], uncalibrated_ttft_mape=b.uncalibrated["ttft_ms"],
                              uncalibrated_tpot_mape=b.uncalibrated["tpot_ms"])
                     for b in found.bands_for(sku, backend, model, "concurrency")]  # fmt: skip
            held_out = None if error is None else HeldOut(
                rows=error.rows, ttft_mape=error.calibrated["ttft_ms"], tpot_mape=error.calibrated["tpot_ms"],
                uncalibrated_ttft_mape=error.uncalibrated["ttft_ms"], uncalibrated_tpot_mape=error.uncalibrated["tpot_ms"],
                ttft_under_p90=error.under_p90.get("ttft_ms"), tpot_under_p90=error.under_p90.get("tpot_ms"),
                load_bands=bands,
            )  # fmt: skip
            scales[backend] = BackendScale(prefill=scale.prefill, decode=scale.decode, fitted_on=fitted_on,
                                           held_out=held_out, ttft_overhead_ms=scale.ttft_overhead_ms)  # fmt: skip
    if missing:
        fitted = sorted({f"{s.system}/{s.backend}" for s in found.scales})
        raise ValueError(
            f"calibration file {resolved} has no scales for {sku} with backend(s) {missing} (it has {fitted}); "
            f"fit them with `spica fidelity --system {sku} --backend {','.join(missing)} --fit FILE`, or drop the backend"
        )
    return Calibration(file=str(resolved), source=found.source, scales=scales)


def sla_safety_problem(sla_safety: str | None, has_sla: bool, calibration: Calibration | None) -> str | None:
    """Why `goal.sla_safety: measured` would do nothing here, or None: it needs an SLA to tighten and, for every
    backend, a calibration that measured its held-out error's quantiles (`spica fidelity --fit` writes them)."""
    if sla_safety is None:
        return None
    if not has_sla:
        return "goal.sla_safety tightens goal.sla's bounds, and there is no goal.sla: set one, or remove sla_safety"
    if calibration is None or not calibration.scales:
        return ("goal.sla_safety: measured tightens the SLA by a calibration's measured held-out error, and there is no "
                "calibration: add `calibration: FILE` (spica fidelity --fit), or remove sla_safety")  # fmt: skip
    unmeasured = sorted(b for b, s in calibration.scales.items() if s.held_out is None or s.held_out.ttft_under_p90 is None)
    if unmeasured:
        return (f"goal.sla_safety: measured needs the calibration's held-out error quantiles, and {calibration.file} "
                f"has none for backend(s) {unmeasured}: fit it again with `spica fidelity --fit`, or remove sla_safety")  # fmt: skip
    return None


def prior_calibration(sku: str, backends: list[str]) -> Calibration | None:
    """The shipped prior for the backends where its cross-validated error beat no correction (None: none kept)."""
    if not PRIOR_FILE.is_file():
        return None
    found = read_calibration(PRIOR_FILE)
    scales = {}
    for backend in backends:
        scale, verdict = found.scale_for(sku, backend), found.verdict_for(sku, backend)
        if scale is None or verdict is None or not verdict.helps:
            continue
        held_out = HeldOut(rows=verdict.rows, ttft_mape=verdict.prior["ttft_ms"], tpot_mape=verdict.prior["tpot_ms"],
                           uncalibrated_ttft_mape=verdict.uncorrected["ttft_ms"],
                           uncalibrated_tpot_mape=verdict.uncorrected["tpot_ms"],
                           ttft_under_p90=verdict.under_p90.get("ttft_ms"), tpot_under_p90=verdict.under_p90.get("tpot_ms"))  # fmt: skip
        scales[backend] = BackendScale(prefill=scale.prefill, decode=scale.decode, held_out=held_out,
                                       fitted_on=f"every measured model of {sku} (the prior; errors left one model out)",
                                       ttft_overhead_ms=scale.ttft_overhead_ms)  # fmt: skip
    if not scales:
        return None
    return Calibration(file=str(PRIOR_FILE), source=f"{found.source}, the prior", scales=scales, prior=True)


def prior_verdicts(sku: str, backends: list[str]) -> list[str]:
    """What the prior says of each backend on `sku`, kept or not, in words (for a report without a correction)."""
    if not PRIOR_FILE.is_file():
        return []
    found = read_calibration(PRIOR_FILE)
    out = []
    for backend in backends:
        verdict = found.verdict_for(sku, backend)
        if verdict is None:
            out.append(f"{sku} / {backend}: no prior (too few measured models)")
        else:
            out.append(("kept: " if verdict.helps else "not kept, it did not beat no correction: ") + verdict.text())
    return out
