"""Fitting step-time scales on measured silicon, and judging them on rows they were not fitted on.

The split is fixed and documented: a row fits the scales when the SHA-256 of its id starts with
an even hex digit (about half the rows, spread over every model and shape); the others are held
out. Per (system, backend), and per (system, backend, model), the prefill scale is the geometric
mean over its fitted rows of measured / replayed TTFT, and the decode scale the same of TPOT: in the replay, TTFT follows the
prefill step time and TPOT the decode step time (doubling `speedup_ratio` halves a closed loop's
TTFT exactly).
"""

from __future__ import annotations

import hashlib
import math
import statistics
from collections.abc import Iterable

from spica_lib.facts.calibration import StepScale
from spica_lib.fidelity.check import RowCheck
from spica_lib.fidelity.silicon import SiliconRow

SPLIT = "rows whose id's SHA-256 starts with an even hex digit fit the scales; the others are held out"


def fits(row: SiliconRow) -> bool:
    """Whether the row is in the fitting half of the split (see SPLIT)."""
    return int(hashlib.sha256(row.id.encode("utf-8")).hexdigest()[0], 16) % 2 == 0


def fit_scales(checks: Iterable[RowCheck]) -> list[StepScale]:
    """Per (system, backend) over every model, then per (system, backend, model), from the replayed fitting rows."""
    fitting = [c for c in checks if c.replayed is not None and fits(c.row)]
    by_system: dict[tuple[str, str, str | None], list[RowCheck]] = {}
    for check in fitting:
        by_system.setdefault((check.row.system, check.row.backend, None), []).append(check)
    for check in fitting:
        by_system.setdefault((check.row.system, check.row.backend, check.row.model), []).append(check)
    return [
        StepScale(
            system=system,
            backend=backend,
            model=model,
            prefill=_geometric_mean(c.measured.ttft_ms / c.replayed.ttft_ms for c in members),
            decode=_geometric_mean(c.measured.tpot_ms / c.replayed.tpot_ms for c in members),
            fit_rows=len(members),
            modes=sorted({c.row.mode for c in members}),
        )
        for (system, backend, model), members in by_system.items()
    ]


def _geometric_mean(ratios: Iterable[float]) -> float:
    return math.exp(statistics.fmean(math.log(r) for r in ratios))
