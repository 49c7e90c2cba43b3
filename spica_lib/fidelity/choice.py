"""Which replay protocol and which correction, chosen per group by cross-validation within the fitting half.

The rows record no engine settings and the step-time scales cannot express every error, so `spica fidelity
--fit` chooses, per (system, backend, model) and per (system, backend) over every model, among a small
documented set: the replay protocols of FIT_PROTOCOLS (fidelity/protocol.py) times the corrections below. Each
candidate is judged by leave-one-out cross-validation over the group's fitting rows only (its parameters fitted
on the other fitting rows, each row predicted in turn); the held-out half is never looked at, and is reported
afterwards only as the test.

The corrections (each fitted on rows replayed uncalibrated; `predict` makes its prediction of a row from that
row's uncalibrated replay). Of TTFT:
- `none`: the replay's TTFT as it is.
- `scale`: a prefill step-time scale (the geometric mean of measured / replayed TTFT), applied by the replay through
  the mocker's speed-up ratio.
- `affine`: TTFT = prefill scale x replayed TTFT + a per-request cost (least squares on the relative errors, the
  cost >= 0); the replay applies the scale and a sweep adds the cost where it judges TTFT (replay/sla_adjust.py).
- `parts`: TTFT = a x queue wait + b x admit-to-first-token + a cost (the replay's own split of its TTFT,
  fidelity/attribution.py). It depends on load as no scale does: the queue's share of TTFT grows with the loop.
  The replay cannot scale its queue apart from its prefill, so this one is a post-hoc prediction: report-only,
  never applied to a sweep.
and of TPOT, with each of them: the replay's as it is, or a decode step-time scale (the geometric mean of measured
/ replayed TPOT, `+ decode`). A closed loop's tokens/s/GPU follows from the two (Little's law).

A candidate may be kept only if it is not worse than the uncorrected default protocol on TPOT and on tokens/s/GPU
(a correction must not buy TTFT with throughput). A correction of TTFT alone, by the default protocol, leaves TPOT
as it is and moves tokens/s/GPU only by TTFT's share of a request's life: its cross-validated tokens/s/GPU MAPE may
be above the default's by at most NOT_WORSE_POINTS (the tables' resolution; leave-one-out on a few rows moves it
by that much either way). A decode scale or another protocol moves both a lot, so one is kept only on at least
MIN_DECODE_ROWS fitting rows and where the 90 % bootstrap upper bound over those rows of its mean error less the
default's is not above 0 for either: the fitting rows must support it, not merely allow it. Among the kept ones the least cross-validated
TTFT MAPE wins, then the least TPOT MAPE, ties to the simpler (the order above, no decode scale first). The correction a sweep applies is the best replay-applicable one (`none`, `scale`, `affine`); where
`parts` beats it, it is recorded beside it as report-only.

The cross-validation predicts a correction post hoc from the uncalibrated replay, with TPOT moved by the decode scale
only. A sweep applies it through the replay, where a prefill scale also slows the decode steps that carry prefill
chunks beside them: on the shipped rows, a x3 prefill scale without a decode scale tripled the replayed TPOT
(docs/fidelity/load.md). So, given `verify`, a candidate with scales is kept for a sweep only after the group's fitting
rows are replayed with its scales (in sample, never the held-out half) and come out not worse than the uncorrected
default protocol on TPOT and tokens/s/GPU, nor by more than NOT_WORSE_POINTS on TTFT; at most MAX_REPLAY_CHECKS candidates are replayed, in the
order above, and where none passes the best candidate without scales (the replay as it is, by its protocol) is kept.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterable

import numpy as np
from pydantic import BaseModel, ConfigDict

from spica_lib.facts.calibration import CandidateError, GroupChoice
from spica_lib.fidelity.attribution import parts_fit, predicted_ttft
from spica_lib.fidelity.check import METRICS, Point, RowCheck
from spica_lib.fidelity.fit import affine_ttft

CORRECTIONS = ("none", "scale", "affine", "parts")
APPLIED = ("none", "scale", "affine")
THROUGHPUT = ("tpot_ms", "tokens_per_second_per_gpu")  # what a kept correction must not make worse  # what the replay (and a sweep) can apply
MIN_DECODE_ROWS = 5  # as a measured stress band needs (config/calibration.py MIN_BAND_ROWS)
NOT_WORSE_POINTS = 1.0  # percentage points of MAPE a TTFT-only correction may move tokens/s/GPU by
BOOTSTRAP, BOOTSTRAP_SEED = 400, 71
MAX_REPLAY_CHECKS = 2  # candidates with scales replayed on the fitting rows before falling back to one without
# The fitting rows each correction needs to be judged: leave one out and still fit its parameters on the rest
# (a scale on one row, the affine line on two, the parts' three coefficients on three).
MIN_FIT_ROWS = {"none": 1, "scale": 2, "affine": 3, "parts": 4}


class Correction(BaseModel):
    """A fitted correction: `kind` of TTFT with its parameters (`queue`, `admit` only for `parts`), and the decode
    scale (1: TPOT as replayed)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: str
    decode_scaled: bool = False
    prefill: float = 1.0
    decode: float = 1.0
    cost_ms: float = 0.0
    queue: float = 1.0
    admit: float = 1.0

    @property
    def label(self) -> str:
        return label(self.kind, self.decode_scaled)

    def predict(self, check: RowCheck) -> RowCheck:
        """The row as this correction predicts it from its uncalibrated replay: TTFT and TPOT corrected, tokens/s/GPU
        moved by the change of a request's life in the closed loop (Little's law)."""
        r = check.replayed
        assert r is not None
        if self.kind == "parts":
            assert check.parts is not None
            ttft = predicted_ttft(check.parts, (self.queue, self.admit, self.cost_ms))
        else:
            ttft = self.prefill * r.ttft_ms + self.cost_ms
        tpot = self.decode * r.tpot_ms
        osl = check.row.osl
        life, new_life = r.ttft_ms + (osl - 1) * r.tpot_ms, ttft + (osl - 1) * tpot
        point = Point(ttft_ms=ttft, tpot_ms=tpot, tokens_per_second_per_gpu=r.tokens_per_second_per_gpu * life / new_life)
        return check.model_copy(update={"replayed": point})

    def parameters(self) -> dict[str, float]:
        if self.kind == "parts":
            return {"queue": self.queue, "admit": self.admit, "cost_ms": self.cost_ms, "decode": self.decode}
        return {"prefill": self.prefill, "decode": self.decode, "cost_ms": self.cost_ms}


def label(kind: str, decode_scaled: bool) -> str:
    return f"{kind} + decode" if decode_scaled else kind


def fit_correction(kind: str, checks: list[RowCheck], decode_scaled: bool = True) -> Correction:
    """`kind` of TTFT (and with `decode_scaled` a decode scale) fitted on `checks` (replayed uncalibrated)."""
    decode = _geometric_mean(c.measured.tpot_ms / c.replayed.tpot_ms for c in checks) if decode_scaled else 1.0
    common = {"kind": kind, "decode_scaled": decode_scaled, "decode": decode}
    if kind == "none":
        return Correction(**common)
    if kind == "scale":
        return Correction(**common, prefill=_geometric_mean(c.measured.ttft_ms / c.replayed.ttft_ms for c in checks))
    if kind == "affine":
        prefill, cost = affine_ttft([(c.replayed.ttft_ms, c.measured.ttft_ms) for c in checks])
        return Correction(**common, prefill=prefill, cost_ms=cost)
    if kind == "parts":
        queue, admit, cost = parts_fit([(c.parts, c.measured.ttft_ms) for c in checks])
        return Correction(**common, queue=queue, admit=admit, cost_ms=cost)
    raise ValueError(f"unknown correction {kind!r}; known: {CORRECTIONS}")


def cross_validated(kind: str, checks: list[RowCheck], decode_scaled: bool = True) -> list[RowCheck]:
    """Each check as `kind` fitted on the others predicts it (leave one out)."""
    if kind == "none" and not decode_scaled:
        return list(checks)
    return [fit_correction(kind, checks[:i] + checks[i + 1 :], decode_scaled).predict(c) for i, c in enumerate(checks)]


def mape(checks: Iterable[RowCheck]) -> dict[str, float]:
    checks = list(checks)
    return {m: 100 * statistics.fmean(abs(getattr(c.replayed, m) / getattr(c.measured, m) - 1) for c in checks)
            for m in METRICS}  # fmt: skip


def usable(kind: str, checks: list[RowCheck], decode_scaled: bool) -> bool:
    """Whether `kind` can be fitted and judged on these rows."""
    if len(checks) < max(MIN_FIT_ROWS[kind], MIN_FIT_ROWS["scale"] if decode_scaled else 1):
        return False
    return kind != "parts" or all(c.parts is not None for c in checks)


Verify = Callable[[str, Correction, list[RowCheck]], list[RowCheck]]


def choose(
    group: tuple[str, str, str | None],
    runs: dict[str, list[RowCheck]],
    default_protocol: str,
    verify: Verify | None = None,
) -> tuple[GroupChoice, dict[str, Correction]] | None:
    """Per group: `runs` maps each protocol to the group's fitting rows replayed uncalibrated by it (the rows every
    protocol replayed, in one order). The choice, and the chosen protocol's corrections fitted on every fitting row
    ("applied", and "report_only" where one is kept). None: no fitting row. `verify(protocol, correction, checks)`
    replays the fitting rows of `checks` by `protocol` with the correction applied as a sweep applies it (see the
    module's docstring); without it, candidates are judged by cross-validation only."""
    common = set.intersection(*({c.row.id for c in run if c.replayed is not None} for run in runs.values()))
    runs = {p: [c for c in run if c.row.id in common] for p, run in runs.items()}
    rows = len(common)
    if rows == 0:
        return None
    floor = runs[default_protocol]  # the uncorrected default protocol: what no kept candidate may be worse than
    candidates = []
    for protocol, checks in runs.items():
        for kind in CORRECTIONS:
            for decode_scaled in (False, True):
                if not usable(kind, checks, decode_scaled):
                    continue
                predicted = cross_validated(kind, checks, decode_scaled)
                cv = mape(predicted)
                moves = decode_scaled or protocol != default_protocol  # TPOT moves too: the rows must support it
                admissible = all(not_worse(predicted, floor, m, supported=moves) for m in THROUGHPUT)
                candidates.append(CandidateError(protocol=protocol, correction=kind, decode_scaled=decode_scaled, cv=cv,
                                                 admissible=admissible))  # fmt: skip
    kept = [c for c in candidates if c.admissible]
    order: Callable[[CandidateError], tuple] = lambda c: (  # noqa: E731
        round(c.cv["ttft_ms"], 6), round(c.cv["tpot_ms"], 6), CORRECTIONS.index(c.correction), c.decode_scaled)
    applied = _replay_checked(sorted((c for c in kept if c.correction in APPLIED), key=order), candidates, runs,
                              floor, verify)  # fmt: skip
    kept = [c for c in candidates if c.admissible and c.replay_admissible is not False]
    best = min(kept, key=order)
    fitted = {"applied": fit_correction(applied.correction, runs[applied.protocol], applied.decode_scaled)}
    if best.correction not in APPLIED and best.cv["ttft_ms"] < applied.cv["ttft_ms"]:
        fitted["report_only"] = fit_correction(best.correction, runs[best.protocol], best.decode_scaled)
    report_only = fitted.get("report_only")
    system, backend, model = group
    choice = GroupChoice(system=system, backend=backend, model=model, fitting_rows=rows, protocol=applied.protocol,
                         applied=applied.correction, decode_scaled=applied.decode_scaled,
                         report_only=report_only and report_only.label,
                         report_only_protocol=best.protocol if report_only else None,
                         report_only_parameters=report_only.parameters() if report_only else {},
                         candidates=candidates)  # fmt: skip
    return choice, fitted


def _replay_checked(
    ordered: list[CandidateError],
    candidates: list[CandidateError],
    runs: dict[str, list[RowCheck]],
    floor: list[RowCheck],
    verify: Verify | None,
) -> CandidateError:
    """The first of `ordered` a sweep may apply: one without scales as it is, one with scales once the fitting rows
    replayed with them are not worse than `floor` on any metric (at most MAX_REPLAY_CHECKS replayed; each replayed
    candidate's in-sample errors are written back into `candidates`)."""
    checked = 0
    for candidate in ordered:
        if verify is None or (candidate.correction == "none" and not candidate.decode_scaled):
            return candidate
        if checked == MAX_REPLAY_CHECKS:
            continue
        checked += 1
        correction = fit_correction(candidate.correction, runs[candidate.protocol], candidate.decode_scaled)
        replayed = {c.row.id: c for c in verify(candidate.protocol, correction, runs[candidate.protocol])
                    if c.replayed is not None}  # fmt: skip
        base = [c for c in floor if c.row.id in replayed]
        mine = mape(replayed[c.row.id] for c in base) if base else {}
        # Not worse on TPOT and tokens/s/GPU at all; on TTFT, the metric corrected, by at most NOT_WORSE_POINTS (a
        # decode scale alone moves TTFT only by the steps a prefill shares, a fraction of a point either way).
        ok = bool(base) and all(mine[m] <= value + (NOT_WORSE_POINTS if m == "ttft_ms" else 0.0)
                                for m, value in mape(base).items())  # fmt: skip
        updated = candidate.model_copy(update={"fitting_replay": mine, "replay_admissible": ok})
        candidates[candidates.index(candidate)] = updated
        if ok:
            return updated
    raise AssertionError("the default protocol uncorrected is always admissible and needs no replay")


def not_worse(predicted: list[RowCheck], floor: list[RowCheck], metric: str, supported: bool = False) -> bool:
    """Whether `predicted`'s mean absolute relative error of `metric` is at most NOT_WORSE_POINTS above `floor`'s on
    the same rows (matched by id); with `supported`, not above it at all, on at least MIN_DECODE_ROWS rows, with the
    90 % bootstrap upper bound of the mean difference not above 0."""
    base = {c.row.id: _error(c, metric) for c in floor}
    differences = np.array([_error(c, metric) - base[c.row.id] for c in predicted if c.row.id in base])
    if differences.size == 0:
        return True
    if not supported:
        return 100 * differences.mean() <= NOT_WORSE_POINTS
    if differences.mean() > 0 or differences.size < MIN_DECODE_ROWS:
        return False
    rng = np.random.default_rng(BOOTSTRAP_SEED)
    means = differences[rng.integers(0, differences.size, (BOOTSTRAP, differences.size))].mean(axis=1)
    return float(np.percentile(means, 90)) <= 0


def _error(check: RowCheck, metric: str) -> float:
    return abs(getattr(check.replayed, metric) / getattr(check.measured, metric) - 1)


def _geometric_mean(ratios: Iterable[float]) -> float:
    return math.exp(statistics.fmean(math.log(r) for r in ratios))
