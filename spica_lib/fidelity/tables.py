"""The errors of replayed rows against their measurements: per group, and the tables `spica fidelity` prints.

MAPE and the signed bias are in percent of the measured value. A group is (system, backend, model), and for the
disagg table also ISL/OSL.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Iterator

from pydantic import BaseModel, ConfigDict

from spica_lib.fidelity.check import METRICS, RowCheck
from spica_lib.fidelity.silicon import SiliconRow


class GroupError(BaseModel):
    """Errors over the replayed rows of one (system, backend, model[, ISL/OSL]): MAPE and signed bias, in percent."""

    model_config = ConfigDict(extra="forbid")

    system: str
    backend: str
    model: str
    isl_osl: str | None = None  # "ISL/OSL" when grouped by it (the disagg table)
    rows: int
    skipped: int
    replay_mape: dict[str, float]
    replay_bias: dict[str, float]
    estimate_mape: dict[str, float]
    estimate_bias: dict[str, float]
    aiconfigurator_mape: dict[str, float] = {}  # empty: aiconfigurator gave no estimate for some replayed row
    aiconfigurator_bias: dict[str, float] = {}


def group_errors(checks: Iterable[RowCheck], by_shape: bool = False) -> list[GroupError]:
    """Per (system, backend, model), and with `by_shape` per ISL/OSL too."""
    groups: dict[tuple[str, str, str, str | None], list[RowCheck]] = {}
    for check in checks:
        row = check.row
        shape = f"{row.isl}/{row.osl}" if by_shape else None
        groups.setdefault((row.system, row.backend, row.model, shape), []).append(check)
    out = []
    for (system, backend, model, shape), members in sorted(groups.items(), key=lambda item: str(item[0])):
        done = [c for c in members if c.replayed is not None]
        if not done:
            continue
        replay = {m: _errors(done, "replayed", m) for m in METRICS}
        estimate = {m: _errors(done, "estimated", m) for m in METRICS}
        theirs = {m: _errors(done, "aiconfigurator", m) for m in METRICS} if all(c.aiconfigurator for c in done) else {}
        out.append(
            GroupError(
                system=system,
                backend=backend,
                model=model,
                isl_osl=shape,
                rows=len(done),
                skipped=len(members) - len(done),
                replay_mape={m: e[0] for m, e in replay.items()},
                replay_bias={m: e[1] for m, e in replay.items()},
                estimate_mape={m: e[0] for m, e in estimate.items()},
                estimate_bias={m: e[1] for m, e in estimate.items()},
                aiconfigurator_mape={m: e[0] for m, e in theirs.items()},
                aiconfigurator_bias={m: e[1] for m, e in theirs.items()},
            )
        )
    return out


def _errors(checks: list[RowCheck], source: str, metric: str) -> tuple[float, float]:
    """(MAPE, mean signed error) in percent of the measured value."""
    relative = [
        (getattr(getattr(c, source), metric) - getattr(c.measured, metric)) / getattr(c.measured, metric)
        for c in checks
    ]
    return 100.0 * statistics.fmean(abs(r) for r in relative), 100.0 * statistics.fmean(relative)


def select_rows(
    rows: Iterable[SiliconRow], systems: list[str], backends: list[str], models: list[str] | None = None
) -> Iterator[SiliconRow]:
    for row in rows:
        if row.system in systems and row.backend in backends and (not models or row.model in models):
            yield row


def markdown_table(groups: list[GroupError]) -> str:
    """One line per group: rows replayed (skipped), then MAPE / bias for TTFT, TPOT and tokens/s/GPU for the
    replay, the static estimate and (where it gave one for every replayed row) aiconfigurator's estimate."""
    by_shape = any(g.isl_osl for g in groups)
    sources = [("replay", "replay"), ("estimate", "estimate")]
    if any(g.aiconfigurator_mape for g in groups):
        sources.append(("aiconfigurator", "aiconfigurator"))
    names = [f"{label} {metric}" for _, label in sources for metric in ("TTFT", "TPOT", "tok/s/GPU")]
    head = ["system", "backend", "model", *(["ISL/OSL"] if by_shape else []), "rows (skipped)", *names]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for g in groups:
        cells = [g.system, g.backend, g.model, *([g.isl_osl or ""] if by_shape else []), f"{g.rows} ({g.skipped})"]
        for source, _ in sources:
            mape, bias = getattr(g, f"{source}_mape"), getattr(g, f"{source}_bias")
            cells += [f"{mape[m]:.0f} % ({bias[m]:+.0f} %)" if m in mape else "—" for m in METRICS]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def held_out_table(before: list[RowCheck], *after: list[RowCheck]) -> str:
    """Per group, the replay's MAPE (bias) on the same rows without calibration, then with each calibration."""
    lines = [
        "| system | backend | model | held-out rows | TTFT | TPOT | tok/s/GPU |",
        "|---|---|---|---|---|---|---|",
    ]
    calibrated = [{(g.system, g.backend, g.model): g for g in group_errors(checks)} for checks in after]
    for g in group_errors(before):
        steps = [g, *(c[(g.system, g.backend, g.model)] for c in calibrated)]
        cells = [" -> ".join(f"{e.replay_mape[m]:.0f} % ({e.replay_bias[m]:+.0f} %)" for e in steps) for m in METRICS]
        lines.append(f"| {g.system} | {g.backend} | {g.model} | {g.rows} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def percentile_table(checks: Iterable[RowCheck]) -> str | None:
    """The replay's p90 TTFT and ITL against the measured p90s, per group, for the rows that measured them (None:
    no row did). Means and p90s side by side: a replay right on the mean can still miss the tail."""
    groups: dict[tuple[str, str, str], list[RowCheck]] = {}
    for c in checks:
        if c.replayed is not None and c.measured.ttft_p90_ms and c.replayed.ttft_p90_ms:
            groups.setdefault((c.row.system, c.row.backend, c.row.model), []).append(c)
    if not groups:
        return None
    lines = ["| system | backend | model | rows with p90s | TTFT mean | TTFT p90 | TPOT mean | TPOT p90 |",
             "|---|---|---|---:|---|---|---|---|"]  # fmt: skip
    for (system, backend, model), members in sorted(groups.items()):
        cells = []
        for metric in ("ttft_ms", "ttft_p90_ms", "tpot_ms", "tpot_p90_ms"):
            pairs = [(getattr(c.measured, metric), getattr(c.replayed, metric)) for c in members]
            pairs = [(m, r) for m, r in pairs if m and r is not None]
            mape = 100 * sum(abs(r / m - 1) for m, r in pairs) / len(pairs) if pairs else None
            bias = 100 * sum(r / m - 1 for m, r in pairs) / len(pairs) if pairs else None
            cells.append("—" if mape is None else f"{mape:.0f} % ({bias:+.0f} %)")
        lines.append(f"| {system} | {backend} | {model} | {len(members)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
