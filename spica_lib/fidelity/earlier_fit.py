"""The calibration fit as `spica fidelity --fit` made it before issue 71, kept to measure the new one against.

Fit both ways on the fitting half (scale-only and affine, fidelity/fit.py), replay the held-out rows with the
scale-only scales (system-wide and the model's own), predict the affine fit's from the uncalibrated replay, and keep
per group the fit of smaller held-out TTFT error. That last step chose on the test rows themselves, so its held-out
error is the best of two on those rows, not an honest test; bench/fidelity_load.py reports it as "the earlier kept
fit" beside the cross-validated choice (fidelity/calibrate.py), which never looks at the held-out half.
"""

from __future__ import annotations

from collections.abc import Callable

from spica_lib.facts.calibration import CalibrationFile, StepScale
from spica_lib.fidelity.check import RowCheck
from spica_lib.fidelity.fit import SPLIT, affine_checks, fit_scales, fits
from spica_lib.fidelity.silicon import SiliconRow

Rescale = Callable[[list[SiliconRow], Callable[[SiliconRow], StepScale | None]], list[RowCheck]]


def earlier_kept_fit(checks: list[RowCheck], rescale: Rescale) -> tuple[list[RowCheck], list[RowCheck]]:
    """(the held-out rows uncalibrated, the same rows by the fit the earlier `--fit` kept for each), replayed again
    by `rescale(rows, scale_for)` (the rows' own protocol)."""
    scaled, affine = fit_scales(checks), fit_scales(checks, affine=True)
    if not scaled:
        return [], []
    calibration = CalibrationFile(source="", split=SPLIT, scales=scaled)
    held_out = [c for c in checks if c.replayed is not None and not fits(c.row)]
    rows = [c.row for c in held_out]
    system_wide = rescale(rows, lambda r: calibration.scale_for(r.system, r.backend))
    own = rescale(rows, lambda r: calibration.scale_for(r.system, r.backend, r.model))
    kept = [(c, s, o) for c, s, o in zip(held_out, system_wide, own, strict=True) if s.replayed is not None and o.replayed is not None]
    before, wide, after = ([k[i] for k in kept] for i in range(3))
    fitted = CalibrationFile(source="", split=SPLIT, scales=affine)
    affine_own = affine_checks(before, after, lambda r: fitted.scale_for(r.system, r.backend, r.model))
    affine_wide = affine_checks(before, wide, lambda r: fitted.scale_for(r.system, r.backend))
    chosen = choose_fits(scaled, affine, {"own": (after, affine_own), "wide": (wide, affine_wide)})
    best = [a if _fit_of(chosen, c.row) == "affine" else c for c, a in zip(after, affine_own, strict=True)]
    return before, best


def choose_fits(
    scaled: list[StepScale], affine: list[StepScale], held: dict[str, tuple[list[RowCheck], list[RowCheck]]]
) -> list[StepScale]:
    """Per (system, backend[, model]): the affine fit where its held-out TTFT MAPE is smaller, else the scale-only
    fit (a model's on its own rows, a system-wide one on every row of its system and backend)."""
    chosen = []
    for scale, line in zip(scaled, affine, strict=True):
        scope = "own" if scale.model else "wide"
        kept, predicted = held[scope]
        mine = [i for i, c in enumerate(kept) if (c.row.system, c.row.backend) == (scale.system, scale.backend)
                and (scale.model is None or c.row.model == scale.model)]  # fmt: skip
        if mine and _ttft_mape([predicted[i] for i in mine]) < _ttft_mape([kept[i] for i in mine]):
            chosen.append(line)
        else:
            chosen.append(scale)
    return chosen


def _ttft_mape(checks: list[RowCheck]) -> float:
    return sum(abs(c.replayed.ttft_ms / c.measured.ttft_ms - 1) for c in checks) / len(checks)


def _fit_of(scales: list[StepScale], row: SiliconRow) -> str:
    found = CalibrationFile(source="", split="", scales=scales).scale_for(row.system, row.backend, row.model)
    return found.fit if found is not None else "scale"
