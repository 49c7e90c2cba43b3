"""Write the report folder of a run: report.md and its plots (the `report` stage and `spica report`)."""

from __future__ import annotations

from pathlib import Path

from spica_lib.base.artifacts import atomic_write_text
from spica_lib.report import plots
from spica_lib.report.markdown import render, score_label
from spica_lib.report.view import RunView

LATENCY_TOP = 5


def plot_names(is_pareto: bool) -> list[str]:
    """The plots a run's report holds, in the order the report shows them."""
    return ["tradeoff.png", "convergence.png", *(["pareto.png"] if is_pareto else []), "latency.png"]


def write_report(view: RunView, report_dir: str | Path) -> list[Path]:
    """Draw every plot and write report.md; return the files written."""
    folder = Path(report_dir)
    folder.mkdir(parents=True, exist_ok=True)
    names = plot_names(view.config.goal.is_pareto)
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
    atomic_write_text(folder / "report.md", render(view, names))
    return [folder / "report.md", *(folder / name for name in names)]


def pareto_axes(view: RunView) -> tuple[str, str]:
    """The two objectives the Pareto plot shows: the first two the goal names."""
    first, second = view.config.goal.resolved_pareto_objectives[:2]
    return first.value, second.value
