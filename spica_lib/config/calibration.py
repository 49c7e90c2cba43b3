"""`calibration`: opt-in step-time scales (a file written by `spica fidelity --fit`), applied to every replay.

Written as a path (relative to the config file's folder); read once when the config is read, and
the scales for the config's hardware and each of its backends are kept in the normalised config,
so the run's hash, manifest and every trial file carry them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from spica_lib.facts.calibration import read_calibration


class BackendScale(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    prefill: float = Field(gt=0)
    decode: float = Field(gt=0)
    fitted_on: str  # "Qwen/Qwen3-32B" (the model's own rows) or "every model" of the system


class Calibration(BaseModel):
    """The calibration file and, once read, its source and the scales of each backend on the config's hardware."""

    model_config = ConfigDict(extra="forbid")

    file: str
    source: str | None = None
    scales: dict[str, BackendScale] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _from_path(cls, data: Any) -> Any:
        return {"file": data} if isinstance(data, str) else data


def resolve_calibration(
    calibration: Calibration, sku: str, model: str, backends: list[str], base_dir: str
) -> Calibration:
    """Read the file (unless its scales are already here, as in a normalised config) for `sku`, `model`, `backends`.

    Raises ValueError naming the file and what is missing: a scale missing for a backend would
    leave it uncalibrated without a word.
    """
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
            scales[backend] = BackendScale(prefill=scale.prefill, decode=scale.decode, fitted_on=fitted_on)
    if missing:
        fitted = sorted({f"{s.system}/{s.backend}" for s in found.scales})
        raise ValueError(
            f"calibration file {resolved} has no scales for {sku} with backend(s) {missing} (it has {fitted}); "
            f"fit them with `spica fidelity --system {sku} --backend {','.join(missing)} --fit FILE`, or drop the backend"
        )
    return Calibration(file=str(resolved), source=found.source, scales=scales)
