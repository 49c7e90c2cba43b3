"""Fitting step-time scales on measured silicon, and judging them on rows they were not fitted on.

The split is fixed and documented: a row fits the scales when the SHA-256 of its id starts with
an even hex digit (about half the rows, spread over every model and shape); the others are held
out. Per (system, backend), and per (system, backend, model), two fits:

- **scale-only**: the prefill scale is the geometric mean over its fitted rows of measured / replayed TTFT,
  and the decode scale the same of TPOT. In the replay, TTFT follows the prefill step time and TPOT the decode
  step time (doubling `speedup_ratio` halves a closed loop's TTFT exactly).
- **affine**: TTFT = prefill scale x replayed TTFT + a per-request fixed cost (the frontend, tokenisation,
  scheduling and network a real stack adds, replay/sla_adjust.py), fitted by least squares on the relative
  errors, the cost at least 0; the decode scale as above. One scale cannot fit both light load, where a fixed
  cost dominates TTFT, and heavy load, where queueing does; a scale and a cost can. The fit needs no replay
  beyond the uncalibrated one: a closed loop's TTFT scales with the prefill steps, and the cost is added.

`affine_checks` predicts the affine fit's held-out rows the same way. The prior (fidelity/prior.py) and the earlier
fit kept for comparison (fidelity/earlier_fit.py) use these; `spica fidelity --fit` now chooses its protocol and
correction by cross-validation within the fitting half (fidelity/choice.py, fidelity/calibrate.py).
"""

from __future__ import annotations

import hashlib
import math
import statistics
from collections.abc import Callable, Iterable

import numpy as np

from spica_lib.facts.calibration import StepScale
from spica_lib.fidelity.check import Point, RowCheck
from spica_lib.fidelity.silicon import SiliconRow, tokens_per_second_per_gpu

SPLIT = "rows whose id's SHA-256 starts with an even hex digit fit the scales; the others are held out"


def fits(row: SiliconRow) -> bool:
    """Whether the row is in the fitting half of the split (see SPLIT)."""
    return int(hashlib.sha256(row.id.encode("utf-8")).hexdigest()[0], 16) % 2 == 0


def fit_scales(checks: Iterable[RowCheck], affine: bool = False) -> list[StepScale]:
    """Per (system, backend) over every model, then per (system, backend, model), from the replayed fitting rows."""
    fitting = [c for c in checks if c.replayed is not None and fits(c.row)]
    by_system: dict[tuple[str, str, str | None], list[RowCheck]] = {}
    for check in fitting:
        by_system.setdefault((check.row.system, check.row.backend, None), []).append(check)
    for check in fitting:
        by_system.setdefault((check.row.system, check.row.backend, check.row.model), []).append(check)
    out = []
    for (system, backend, model), members in by_system.items():
        decode = _geometric_mean(c.measured.tpot_ms / c.replayed.tpot_ms for c in members)
        if affine:
            prefill, overhead = affine_ttft([(c.replayed.ttft_ms, c.measured.ttft_ms) for c in members])
        else:
            prefill, overhead = _geometric_mean(c.measured.ttft_ms / c.replayed.ttft_ms for c in members), 0.0
        out.append(StepScale(system=system, backend=backend, model=model, prefill=prefill, decode=decode,
                             fit_rows=len(members), modes=sorted({c.row.mode for c in members}),
                             ttft_overhead_ms=overhead, fit="affine" if affine else "scale"))  # fmt: skip
    return out


def affine_ttft(pairs: list[tuple[float, float]]) -> tuple[float, float]:
    """(scale, cost ms) minimising sum(((measured - scale x replayed - cost) / measured)^2), the cost >= 0."""
    replayed = np.array([r for r, _ in pairs], dtype=float)
    measured = np.array([m for _, m in pairs], dtype=float)
    weight = 1.0 / measured  # relative errors: each row counts as much, whatever its level
    if len(pairs) >= 2:
        design = np.column_stack([replayed * weight, weight])
        (scale, cost), *_ = np.linalg.lstsq(design, np.ones_like(measured), rcond=None)
        if cost >= 0 and scale > 0:
            return float(scale), float(cost)
    # No cost (or one row): the relative least-squares scale alone.
    scale = float(np.sum(replayed * weight) / np.sum((replayed * weight) ** 2))
    return scale, 0.0


def affine_checks(
    uncalibrated: list[RowCheck], decoded: list[RowCheck], scale_for: Callable[[SiliconRow], StepScale | None]
) -> list[RowCheck]:
    """The held-out rows as the affine fit predicts them: TTFT = scale x the uncalibrated replay's + the cost, TPOT
    as replayed with the same decode scale (`decoded`), tokens/s/GPU from those two as the row's closed loop."""
    out = []
    for before, after in zip(uncalibrated, decoded, strict=True):
        scale = scale_for(before.row)
        if scale is None or before.replayed is None or after.replayed is None:
            continue
        row = before.row
        ttft = scale.prefill * before.replayed.ttft_ms + scale.ttft_overhead_ms
        tpot = after.replayed.tpot_ms
        tokens = tokens_per_second_per_gpu(row.concurrency, row.osl, ttft, tpot, row.gpus)
        out.append(before.model_copy(update={"replayed": Point(ttft_ms=ttft, tpot_ms=tpot, tokens_per_second_per_gpu=tokens)}))
    return out


def under_p90(checks: list[RowCheck]) -> dict[str, float]:
    """Per TTFT and TPOT, the 90th percentile of measured / predicted - 1 over the checks (how much slower silicon
    was than predicted in 9 rows of 10; negative when it was faster)."""
    out = {}
    for metric in ("ttft_ms", "tpot_ms"):
        ratios = [getattr(c.measured, metric) / getattr(c.replayed, metric) - 1 for c in checks if c.replayed is not None]
        if ratios:
            out[metric] = float(np.percentile(ratios, 90))
    return out


def _geometric_mean(ratios: Iterable[float]) -> float:
    return math.exp(statistics.fmean(math.log(r) for r in ratios))
