"""Write the report folder of a run: report.md and its plots (the `report` stage and `spica report`)."""

from __future__ import annotations

from pathlib import Path

from spica_lib.base.artifacts import atomic_write_text
from spica_lib.report import plots
from spica_lib.report.markdown import render, score_label
from spica_lib.run.view import RunView

LATENCY_TOP = 5


def plot_names(is_pareto: bool, capacity: bool = False) -> list[str]:
    """The plots a run's report holds, in the order the report shows them."""
    pareto, load = (["pareto.png"] if is_pareto else []), (["capacity.png"] if capacity else [])
    return ["tradeoff.png", "convergence.png", *pareto, "latency.png", *load]


def write_report(view: RunView, report_dir: str | Path) -> list[Path]:
    """Draw every plot and write report.md; return the files written."""
    folder = Path(report_dir)
    folder.mkdir(parents=True, exist_ok=True)
    names = plot_names(view.config.goal.is_pareto, bool(view.config.sweep.capacity_top))
    label = score_label(view)
    points = view.tradeoff_points()
    winner = next((p for p in points if view.ranked and p.key == view.ranked[0].key), None)
    plots.tradeoff(points, None if view.config.goal.is_pareto else winner, label, folder / "tradeoff.png")
    plots.convergence(view.convergence(), label, folder / "convergence.png")
    if view.config.goal.is_pareto:
        x, y = pareto_axes(view)
        everything = [(r.candidate.objectives[x], r.candidate.objectives[y]) for r in view.rows]
        front = [(r.candidate.objectives[x], r.candidate.objectives[y]) for r in view.ranked]
        plots.pareto(everything, front, (x, y), folder / "pareto.png")
    top = view.latency_rows(LATENCY_TOP)
    sla = view.config.goal.sla
    plots.latency(
        [f"#{i}" for i in range(1, len(top) + 1)],
        [ttft for _, ttft, _ in top],
        [itl for _, _, itl in top],
        (sla.ttft_ms if sla else None, sla.itl_ms if sla else None),
        folder / "latency.png",
    )
    if "capacity.png" in names:
        _capacity_plot(view, folder / "capacity.png")
    atomic_write_text(folder / "report.md", render(view, names))
    return [folder / "report.md", *(folder / name for name in names)]


def _capacity_plot(view: RunView, path: Path) -> None:
    """Latency against load for each sized deployment (results/capacity.py), from its bisection's replays."""
    capacity, sla = view.capacity, view.config.goal.sla
    rank = {row.key: position for position, row in enumerate(view.ranked, start=1)}
    statistic = sla.statistic if sla is not None and sla.is_constraint else "mean"
    prefix = {"mean": "mean", "p50": "mean"}.get(statistic, statistic)
    curves: dict[str, list[tuple[float, float | None, float | None, bool]]] = {}
    by_rate = capacity is not None and capacity.offered_rps is not None
    for deployment in capacity.deployments if capacity is not None else []:
        curves[f"#{rank.get(deployment.key, '?')}"] = [
            (
                p.factor * capacity.offered_rps if by_rate else p.factor,
                p.metrics.get(f"{prefix}_ttft_ms"),
                p.metrics.get(f"{prefix}_itl_ms"),
                p.meets_sla,
            )
            for p in deployment.points
        ]
    offered = capacity.offered_rps if by_rate else 1.0
    label = "arrival rate (req/s)" if by_rate else "load (x the offered)"
    bounds = (sla.ttft_ms if sla else None, sla.itl_ms if sla else None)
    plots.load_curve(curves, label, offered or 1.0, bounds, prefix, path)


def pareto_axes(view: RunView) -> tuple[str, str]:
    """The two objectives the Pareto plot shows: the first two the goal names."""
    first, second = view.config.goal.resolved_pareto_objectives[:2]
    return first.value, second.value
