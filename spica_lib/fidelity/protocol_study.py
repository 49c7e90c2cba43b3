"""Which replay protocol agrees with the silicon: the same rows replayed by each, their errors side by side.

`protocol_table` chains each protocol's MAPE (bias) per group (and per ISL/OSL), next to the last
protocol's TTFT without the opening wave and aiconfigurator's own TTFT. `protocol_choice_table`
asks how far a protocol picked per group could go: it picks, per (system, backend, model), the
protocol (with or without the opening wave) of least TTFT error on the fitting half of the rows
(fit.py's split) and gives its error on the held-out half. What no protocol removes is the timing
model's share of the error.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable

from spica_lib.fidelity.check import RowCheck
from spica_lib.fidelity.fit import fits


def protocol_table(runs: list[list[RowCheck]], by_shape: bool = False) -> str:
    """On the rows every protocol replayed, per (system, backend, model) and with `by_shape` per ISL/OSL too:
    MAPE (bias) of TTFT by each run in turn, the last run's TTFT without the opening wave, aiconfigurator's
    TTFT, then TPOT and tokens/s/GPU by each run; without `by_shape`, then the fitting and held-out halves."""
    replayed = [{c.row.id: c for c in checks if c.replayed is not None} for checks in runs]
    common = set.intersection(*(set(r) for r in replayed))
    rows = [c.row for c in runs[-1] if c.row.id in common]
    groups: dict[tuple, list[list[RowCheck]]] = {}
    for row in rows:
        key = (row.system, row.backend, row.model, *((f"{row.isl}/{row.osl}",) if by_shape else ()))
        groups.setdefault(key, []).append([r[row.id] for r in replayed])
    head = "| system | backend | model | ISL/OSL | rows |" if by_shape else "| system | backend | model | rows |"
    lines = [
        head + " TTFT | TTFT without the opening wave | aiconfigurator TTFT | TPOT | tok/s/GPU |",
        "|" + "---|" * (head.count("|") - 2) + "---:|" + "---|" * 5,
    ]
    for key, members in sorted(groups.items(), key=lambda item: tuple(map(str, item[0]))):
        lines.append("| " + " | ".join(key) + f" | {len(members)} | " + " | ".join(_protocol_cells(members)) + " |")
    if not by_shape:
        for half, keep in (("fitting half", True), ("held-out half", False)):
            part = [members for group in groups.values() for members in group if fits(members[-1].row) == keep]
            if part:
                lines.append(f"| {half} | | | {len(part)} | {_chain(part, 'ttft_ms')} | | | | |")
    return "\n".join(lines)


def _protocol_cells(members: list[list[RowCheck]]) -> list[str]:
    last = [checks[-1] for checks in members]
    opening = [(c.ttft_after_opening_wave_ms, c.measured.ttft_ms) for c in last if c.ttft_after_opening_wave_ms]
    aiconfigurator = [(c.aiconfigurator.ttft_ms, c.measured.ttft_ms) for c in last if c.aiconfigurator is not None]
    return [_chain(members, "ttft_ms"), _error(opening), _error(aiconfigurator), _chain(members, "tpot_ms"),
            _chain(members, "tokens_per_second_per_gpu")]  # fmt: skip


def _chain(members: list[list[RowCheck]], metric: str) -> str:
    """`metric`'s replay MAPE (bias) by each protocol in turn."""
    return " -> ".join(
        _error([(getattr(checks[i].replayed, metric), getattr(checks[i].measured, metric)) for checks in members])
        for i in range(len(members[0]))
    )


def _error(values: list[tuple[float, float]]) -> str:
    """MAPE (mean signed error) of (predicted, measured) pairs, in percent; "-" for none."""
    if not values:
        return "-"
    relative = [(predicted - measured) / measured for predicted, measured in values]
    return f"{100 * statistics.fmean(abs(r) for r in relative):.0f} % ({100 * statistics.fmean(relative):+.0f} %)"


def protocol_choice_table(runs: dict[str, list[RowCheck]]) -> str:
    """Per group: the protocol of least TTFT MAPE on the fitting half (protocol name -> its checks), its
    fitting-half error, and its error on the held-out half."""
    variants: dict[str, Callable[[RowCheck], float | None]] = {}
    for name in runs:
        variants[name] = lambda c: c.replayed.ttft_ms if c.replayed is not None else None
        variants[f"{name}, without the opening wave"] = lambda c: c.ttft_after_opening_wave_ms
    by_variant = {variant: runs[variant.split(",")[0]] for variant in variants}
    groups = sorted({(c.row.system, c.row.backend, c.row.model) for checks in runs.values() for c in checks})
    lines = ["| system | backend | model | protocol chosen on the fitting half | fitting half | held-out half |",
             "|---|---|---|---|---|---|"]  # fmt: skip

    def error(variant: str, group: tuple, fitting: bool) -> tuple[float, int]:
        values = [(ttft, c.measured.ttft_ms) for c in by_variant[variant]
                  if (c.row.system, c.row.backend, c.row.model) == group and fits(c.row) == fitting
                  and (ttft := variants[variant](c)) is not None]  # fmt: skip
        if not values:
            return float("inf"), 0
        return 100 * statistics.fmean(abs(p - m) / m for p, m in values), len(values)

    for group in groups:
        fitted = {variant: error(variant, group, True) for variant in variants}
        best = min(fitted, key=lambda variant: fitted[variant][0])
        if fitted[best][1] == 0:
            continue
        held, count = error(best, group, False)
        held_text = f"{held:.0f} % ({count} rows)" if count else "-"
        lines.append(f"| {' | '.join(group)} | {best} | {fitted[best][0]:.0f} % ({fitted[best][1]} rows) | {held_text} |")
    return "\n".join(lines)
