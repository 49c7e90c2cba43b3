"""Does the replay order deployments as the silicon did? Kendall's tau and top-1 regret per group.

A search needs the order right more than the level. A group is the measured rows that differ only in
the deployment (parallel shape and concurrency): the same system, backend, measured version, model,
precision and ISL/OSL. For each group of at least `MIN_ROWS` replayed rows, each source (the replay,
our static estimate, aiconfigurator's own estimate where it gave one for every row of the group) is
scored by:
- Kendall's tau-b between its order and the measurement's, by output tokens/s per GPU;
- top-1 regret: how much less the row it ranks first measured than the best measured row, in
  percent of the best (0: it picked the measured best).
The same two figures are given for goodput under the default config's SLA (`SLA_MS`: mean TTFT and
TPOT bounds): a row's tokens/s per GPU when it meets both bounds, else 0, by the source's own TTFT and
TPOT. They are left out of a group where fewer than two measured rows meet the bounds (no order to get).
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable

from pydantic import BaseModel, ConfigDict

from spica_lib.fidelity.check import RowCheck

MIN_ROWS = 5
SOURCES = ("replayed", "estimated", "aiconfigurator")
SOURCE_NAMES = {"replayed": "replay", "estimated": "estimate", "aiconfigurator": "aiconfigurator"}
METRIC = "tokens_per_second_per_gpu"
SLA_MS = (2000.0, 50.0)  # config/default.yaml's mean TTFT and ITL bounds


class GroupRanking(BaseModel):
    """How well each source orders one group's rows."""

    model_config = ConfigDict(extra="forbid")

    system: str
    backend: str
    model: str
    measured_version: str
    precision: str
    isl: int
    osl: int
    rows: int
    tau: dict[str, float | None]  # source -> Kendall's tau-b (None: an order with no pair to compare; absent: no source)
    regret_percent: dict[str, float]  # source -> top-1 regret
    measured_within_sla: int = 0  # rows whose measurement meets SLA_MS
    goodput_tau: dict[str, float | None] = {}  # the same, ranking goodput under SLA_MS (empty: too few rows meet it)
    goodput_regret_percent: dict[str, float] = {}


def ranking_groups(checks: Iterable[RowCheck], min_rows: int = MIN_ROWS) -> list[GroupRanking]:
    groups: dict[tuple, list[RowCheck]] = {}
    for check in checks:
        if check.replayed is None or check.estimated is None:
            continue
        row = check.row
        key = (row.system, row.backend, row.model, row.measured_version, row.precision, row.isl, row.osl)
        groups.setdefault(key, []).append(check)
    out = []
    for (system, backend, model, version, precision, isl, osl), members in sorted(groups.items()):
        if len(members) < min_rows:
            continue
        measured = [getattr(c.measured, METRIC) for c in members]
        tau, regret, goodput_tau, goodput_regret = {}, {}, {}, {}
        measured_goodput = [_goodput(c.measured) for c in members]
        within = sum(1 for value in measured_goodput if value > 0)
        for source in SOURCES:
            if any(getattr(c, source) is None for c in members):
                continue  # aiconfigurator gave no estimate for some row: no order of its own to judge
            predicted = [getattr(getattr(c, source), METRIC) for c in members]
            tau[source] = kendall_tau_b(predicted, measured)
            regret[source] = top1_regret(predicted, measured)
            if within >= 2:
                predicted_goodput = [_goodput(getattr(c, source)) for c in members]
                goodput_tau[source] = kendall_tau_b(predicted_goodput, measured_goodput)
                goodput_regret[source] = top1_regret(predicted_goodput, measured_goodput)
        out.append(
            GroupRanking(
                system=system, backend=backend, model=model, measured_version=version, precision=precision,
                isl=isl, osl=osl, rows=len(members), tau=tau, regret_percent=regret, measured_within_sla=within,
                goodput_tau=goodput_tau, goodput_regret_percent=goodput_regret,
            )  # fmt: skip
        )
    return out


def _goodput(point) -> float:
    ttft, tpot = SLA_MS
    return point.tokens_per_second_per_gpu if point.ttft_ms <= ttft and point.tpot_ms <= tpot else 0.0


def kendall_tau_b(predicted: list[float], measured: list[float]) -> float | None:
    """Kendall's tau-b (ties in either order counted as scipy does)."""
    from scipy.stats import kendalltau

    tau = kendalltau(predicted, measured).statistic
    return None if tau != tau else float(tau)


def top1_regret(predicted: list[float], measured: list[float]) -> float:
    """Percent by which the measured value of the predicted best falls short of the measured best."""
    picked = max(range(len(predicted)), key=lambda i: predicted[i])
    best = max(measured)
    return 100.0 * (best - measured[picked]) / best


def ranking_table(groups: list[GroupRanking]) -> str:
    """One line per group, then the medians over groups."""
    figures = [f"{SOURCE_NAMES[s]} {figure}" for s in SOURCES for figure in ("tau", "regret")]
    lines = [
        "| system | backend | model | measured on | ISL/OSL | rows | " + " | ".join(figures) + " | rows within SLA | "
        + " | ".join(f"goodput: {figure}" for figure in figures) + " |",
        "|---|---|---|---|---|---:|" + "---:|" * (4 * len(SOURCES) + 1),
    ]
    for g in groups:
        cells = []
        for source in SOURCES:
            cells += [_tau(g.tau.get(source)), _percent(g.regret_percent.get(source))]
        cells.append(str(g.measured_within_sla))
        for source in SOURCES:
            cells += [_tau(g.goodput_tau.get(source)), _percent(g.goodput_regret_percent.get(source))]
        lines.append(
            f"| {g.system} | {g.backend} | {g.model}{' ' + g.precision if g.precision else ''} | {g.measured_version} "
            f"| {g.isl}/{g.osl} | {g.rows} | " + " | ".join(cells) + " |"
        )
    if groups:
        cells = []
        for taus, regrets in (("tau", "regret_percent"), ("goodput_tau", "goodput_regret_percent")):
            for source in SOURCES:
                tau_values = [v for g in groups if (v := getattr(g, taus).get(source)) is not None]
                regret_values = [v for g in groups if (v := getattr(g, regrets).get(source)) is not None]
                cells += [_tau(_median(tau_values)), _percent(_median(regret_values))]
            if taus == "tau":
                cells.append("")
        lines.append(f"| median over groups ({len(groups)}) | | | | | | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def _tau(value: float | None) -> str:
    return f"{value:.2f}" if value is not None else "—"


def _percent(value: float | None) -> str:
    return f"{value:.1f} %" if value is not None else "—"
