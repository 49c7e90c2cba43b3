"""The error by load: held-out errors per contiguous concurrency band and per ISL band.

One MAPE per group hides where it comes from: the issue's probes found the replay's TTFT error growing with the
loop's concurrency. So the held-out rows of each (system, backend, model) are also judged per band of
concurrency (LOAD_BANDS: 1-8, 9-32, 33+) and of ISL (ISL_BANDS: 1-1024, 1025-4096, 4097+), before and after
calibration. The bands are contiguous and cover every row (the last is open above). A calibration file keeps
the concurrency bands (`BandError`, facts/calibration.py), so a sweep's report can name the measured error for
the load its recommended deployment ran at (report/markdown.py).
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence

from spica_lib.facts.calibration import BandError
from spica_lib.fidelity.check import RowCheck

LOAD_BANDS = (8, 32)  # upper bounds of the closed bands: 1-8, 9-32, 33+ (c = 4, 8, 16, 32, 64 hold most rows)
ISL_BANDS = (1024, 4096)  # 1-1024, 1025-4096, 4097+ (the rows' ISLs: 128-1024, 2000-4096, 8000-8192)
BAND_METRICS = ("ttft_ms", "tpot_ms")
KINDS = {"concurrency": LOAD_BANDS, "isl": ISL_BANDS}


def band_bounds(uppers: Sequence[int]) -> list[tuple[int, int | None]]:
    """(low, high) of each band, high None for the open last one: contiguous from 1, covering every value."""
    lows = [1, *(u + 1 for u in uppers)]
    return list(zip(lows, [*uppers, None], strict=True))


def band_label(low: int, high: int | None) -> str:
    return f"{low}+" if high is None else f"{low}–{high}"


def band_of(value: int, uppers: Sequence[int]) -> tuple[int, int | None]:
    """The band holding `value` (>= 1)."""
    for low, high in band_bounds(uppers):
        if high is None or value <= high:
            return low, high
    raise AssertionError("the last band is open")


def _value(check: RowCheck, kind: str) -> int:
    return check.row.concurrency if kind == "concurrency" else check.row.isl


def _mape(checks: list[RowCheck], metric: str) -> float:
    return 100 * statistics.fmean(abs(getattr(c.replayed, metric) / getattr(c.measured, metric) - 1) for c in checks)


def band_errors(before: Iterable[RowCheck], after: Iterable[RowCheck], kind: str) -> list[BandError]:
    """Per (system, backend, model) and band of `kind`: the held-out rows' MAPE without and with calibration (the
    same rows in both, by id: a row replayed only one way is left out). Bands without rows are not listed."""
    uppers = KINDS[kind]
    corrected = {c.row.id: c for c in after if c.replayed is not None}
    cells: dict[tuple, list[tuple[RowCheck, RowCheck]]] = {}
    for check in before:
        if check.replayed is None or check.row.id not in corrected:
            continue
        row = check.row
        key = (row.system, row.backend, row.model, *band_of(_value(check, kind), uppers))
        cells.setdefault(key, []).append((check, corrected[row.id]))
    out = []
    for (system, backend, model, low, high), pairs in sorted(cells.items(), key=lambda item: str(item[0][:3]) + f"{item[0][3]:09d}"):
        plain, fixed = [p for p, _ in pairs], [f for _, f in pairs]
        out.append(BandError(system=system, backend=backend, model=model, kind=kind, low=low, high=high, rows=len(pairs),
                             uncalibrated={m: _mape(plain, m) for m in BAND_METRICS},
                             calibrated={m: _mape(fixed, m) for m in BAND_METRICS}))  # fmt: skip
    return out


def band_table(errors: list[BandError], calibrated: bool = True) -> str:
    """One line per group, one cell per band: rows, TTFT and TPOT MAPE uncalibrated -> calibrated (without
    `calibrated`: uncalibrated only)."""
    if not errors:
        return "(no row replayed both ways)"
    kind = errors[0].kind
    bounds = band_bounds(KINDS[kind])
    head = " | ".join(f"{kind} {band_label(*b)}: rows, TTFT, TPOT" for b in bounds)
    lines = [f"| system | backend | model | {head} |", "|---|---|---|" + "---|" * len(bounds)]
    groups: dict[tuple[str, str, str], dict[tuple[int, int | None], BandError]] = {}
    for e in errors:
        groups.setdefault((e.system, e.backend, e.model), {})[(e.low, e.high)] = e
    for (system, backend, model), cells in groups.items():
        shown = []
        for bound in bounds:
            e = cells.get(bound)
            if e is None:
                shown.append("—")
            elif calibrated:
                shown.append(f"{e.rows}: {e.uncalibrated['ttft_ms']:.0f} → {e.calibrated['ttft_ms']:.0f} %, "
                             f"{e.uncalibrated['tpot_ms']:.0f} → {e.calibrated['tpot_ms']:.0f} %")  # fmt: skip
            else:
                shown.append(f"{e.rows}: {e.uncalibrated['ttft_ms']:.0f} %, {e.uncalibrated['tpot_ms']:.0f} %")
        lines.append(f"| {system} | {backend} | {model} | " + " | ".join(shown) + " |")
    return "\n".join(lines)


def band_medians(errors: list[BandError]) -> str:
    """Per band: the median over groups of TTFT and TPOT MAPE, uncalibrated -> calibrated, and the rows behind it."""
    kind = errors[0].kind if errors else "concurrency"
    lines = [f"| {kind} band | groups | rows | median TTFT MAPE | median TPOT MAPE |", "|---|---:|---:|---|---|"]
    for low, high in band_bounds(KINDS[kind]):
        cell = [e for e in errors if (e.low, e.high) == (low, high)]
        if not cell:
            lines.append(f"| {band_label(low, high)} | 0 | 0 | — | — |")
            continue
        med = {m: (statistics.median(e.uncalibrated[m] for e in cell), statistics.median(e.calibrated[m] for e in cell))
               for m in BAND_METRICS}  # fmt: skip
        lines.append(f"| {band_label(low, high)} | {len(cell)} | {sum(e.rows for e in cell)} | "
                     f"{med['ttft_ms'][0]:.0f} → {med['ttft_ms'][1]:.0f} % | {med['tpot_ms'][0]:.0f} → {med['tpot_ms'][1]:.0f} % |")  # fmt: skip
    return "\n".join(lines)


def band_overview(checks: list[RowCheck], kind: str) -> str:
    """Every replayed row per band: rows, groups, TTFT and TPOT MAPE (signed bias), and the replay's mean share of
    TTFT spent queueing (fidelity/attribution.py)."""
    uppers = KINDS[kind]
    lines = [f"| {kind} band | rows | groups | TTFT MAPE (bias) | TPOT MAPE (bias) | replay's queue share of TTFT |",
             "|---|---:|---:|---|---|---:|"]  # fmt: skip
    for low, high in band_bounds(uppers):
        mine = [c for c in checks if c.replayed is not None and band_of(_value(c, kind), uppers) == (low, high)]
        if not mine:
            continue
        cells = []
        for metric in BAND_METRICS:
            rel = [getattr(c.replayed, metric) / getattr(c.measured, metric) - 1 for c in mine]
            cells.append(f"{100 * statistics.fmean(abs(r) for r in rel):.0f} % ({100 * statistics.fmean(rel):+.0f} %)")
        share = [c.parts.queue_ms / c.parts.ttft_ms for c in mine if c.parts is not None and c.parts.ttft_ms > 0]
        queued = f"{100 * statistics.fmean(share):.0f} %" if share else "—"
        groups = len({(c.row.system, c.row.backend, c.row.model) for c in mine})
        lines.append(f"| {band_label(low, high)} | {len(mine)} | {groups} | {cells[0]} | {cells[1]} | {queued} |")
    return "\n".join(lines)
