"""A prior correction per (system, backend), from aiconfigurator's measured rows, kept only where it helps.

Without the user's own rows a sweep has only the rows aiconfigurator ships (`silicon_sample.csv`), and those are
of other models than the user's, mostly. So the prior is judged as it will be used, on a model it was not fitted
on: for each (system, backend), each measured model is left out in turn, the affine fit (fidelity/fit.py:
prefill scale and per-request cost, decode scale) is made on the other models' rows and judged on the left-out
model's. The prior is the fit on every model's rows, and it is kept for that (system, backend) only where the
cross-validated error (the mean MAPE of TTFT, TPOT and tokens/s/GPU over the left-out models' rows) beats no
correction on the same rows. The verdicts, kept or not, are in the file (`cross_validated`), and a sweep's
report says which applied and its error (config/calibration.py).
"""

from __future__ import annotations

import statistics

from spica_lib.facts.calibration import CrossValidated, StepScale
from spica_lib.fidelity.check import RowCheck
from spica_lib.fidelity.fit import affine_checks, affine_ttft, under_p90

MIN_MODELS = 2  # a (system, backend) with fewer measured models has nothing to leave one out against
METRICS = ("ttft_ms", "tpot_ms", "tokens_per_second_per_gpu")


def fit_prior(checks: list[RowCheck]) -> tuple[list[StepScale], list[CrossValidated]]:
    """The kept priors (model None, affine) and every (system, backend)'s cross-validated verdict."""
    groups: dict[tuple[str, str], list[RowCheck]] = {}
    for check in checks:
        if check.replayed is not None:
            groups.setdefault((check.row.system, check.row.backend), []).append(check)
    scales, verdicts = [], []
    for (system, backend), members in sorted(groups.items()):
        models = sorted({c.row.model for c in members})
        if len(models) < MIN_MODELS:
            continue
        predicted, plain = [], []
        for model in models:
            fitting = [c for c in members if c.row.model != model]
            left_out = [c for c in members if c.row.model == model]
            line = affine_line(system, backend, fitting)
            predicted += affine_checks(left_out, _decoded(left_out, line.decode), lambda _: line)  # noqa: B023
            plain += left_out
        uncorrected, corrected = mape(plain), mape(predicted)
        helps = statistics.fmean(corrected.values()) < statistics.fmean(uncorrected.values())
        verdicts.append(CrossValidated(system=system, backend=backend, models=models, rows=len(plain),
                                       uncorrected=uncorrected, prior=corrected, helps=helps,
                                       under_p90=under_p90(predicted)))  # fmt: skip
        if helps:
            scales.append(affine_line(system, backend, members))
    return scales, verdicts


def affine_line(system: str, backend: str, checks: list[RowCheck]) -> StepScale:
    """The affine fit over `checks` (every model): prefill scale and per-request cost, decode scale."""
    prefill, cost = affine_ttft([(c.replayed.ttft_ms, c.measured.ttft_ms) for c in checks])
    decode = statistics.geometric_mean(c.measured.tpot_ms / c.replayed.tpot_ms for c in checks)
    return StepScale(system=system, backend=backend, model=None, prefill=prefill, decode=decode, fit_rows=len(checks),
                     modes=sorted({c.row.mode for c in checks}), ttft_overhead_ms=cost, fit="affine")  # fmt: skip


def _decoded(checks: list[RowCheck], decode: float) -> list[RowCheck]:
    """The checks with TPOT as a decode scale makes it (a closed loop's TPOT follows the decode step time)."""
    return [c.model_copy(update={"replayed": c.replayed.model_copy(update={"tpot_ms": c.replayed.tpot_ms * decode})})
            for c in checks]  # fmt: skip


def mape(checks: list[RowCheck]) -> dict[str, float]:
    """Per metric, the MAPE in percent of the checks' replayed (or predicted) values against the measured."""
    return {m: 100 * statistics.fmean(abs(getattr(c.replayed, m) / getattr(c.measured, m) - 1) for c in checks)
            for m in METRICS}  # fmt: skip
