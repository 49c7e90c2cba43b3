"""The report's plots, drawn from the plain data `RunView` computes (matplotlib, no display needed)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from spica_lib.base.artifacts import atomic_path
from spica_lib.run.view import BestSoFar, Point

BRANCH_COLOURS = {"agg": "tab:blue", "disagg": "tab:orange"}


def _figure() -> tuple[Any, Any]:
    import matplotlib

    matplotlib.use("Agg")  # files only; never a window
    from matplotlib import pyplot

    figure, axes = pyplot.subplots(figsize=(7.5, 4.8), dpi=110)
    axes.grid(True, alpha=0.3)
    return figure, axes


def _legend(axes: Any) -> None:
    if axes.get_legend_handles_labels()[0]:  # an empty plot (nothing feasible yet) has nothing to explain
        axes.legend(fontsize="small")


def _save(figure: Any, path: str | Path) -> None:
    from matplotlib import pyplot

    figure.tight_layout()
    with atomic_path(path) as temporary:
        figure.savefig(temporary, format="png")
    pyplot.close(figure)


def tradeoff(points: list[Point], winner: Point | None, score_label: str, path: str | Path) -> None:
    """Score against GPUs for every feasible deployment; SLA misses hollow, the winner named."""
    figure, axes = _figure()
    for branch in dict.fromkeys(p.branch for p in points):
        colour = BRANCH_COLOURS.get(branch, "tab:green")
        met = [p for p in points if p.branch == branch and not p.misses_sla]
        missed = [p for p in points if p.branch == branch and p.misses_sla]
        axes.scatter([p.used_gpus for p in met], [p.score for p in met], color=colour, label=f"{branch}: meets SLA")
        if missed:
            axes.scatter(
                [p.used_gpus for p in missed],
                [p.score for p in missed],
                facecolors="none",
                edgecolors=colour,
                marker="X",
                label=f"{branch}: misses SLA",
            )
    if winner is not None:
        axes.scatter([winner.used_gpus], [winner.score], s=220, facecolors="none", edgecolors="black", linewidths=2)
        axes.annotate("winner", (winner.used_gpus, winner.score), textcoords="offset points", xytext=(10, 8))
    axes.set_xlabel("GPUs provisioned")
    axes.set_ylabel(score_label)
    axes.set_title("Every feasible deployment: score against GPUs")
    _legend(axes)
    _save(figure, path)


def convergence(series: dict[str, list[BestSoFar]], score_label: str, path: str | Path) -> None:
    """Best score so far per trial, per branch, with round boundaries marked on the x axis."""
    figure, axes = _figure()
    for branch, points in series.items():
        shown = [p for p in points if p.best is not None]
        axes.step([p.trial for p in shown], [p.best for p in shown], where="post", label=branch,
                  color=BRANCH_COLOURS.get(branch))  # fmt: skip
        starts = [p.trial for i, p in enumerate(points) if i == 0 or points[i - 1].round != p.round]
        for start in starts[1:]:
            axes.axvline(start - 0.5, color=BRANCH_COLOURS.get(branch, "grey"), alpha=0.15)
    axes.set_xlabel("trial (in the order the branch observed them; faint lines start a round)")
    axes.set_ylabel(f"best {score_label} so far")
    axes.set_title("Convergence per branch")
    _legend(axes)
    _save(figure, path)


def pareto(all_points: list[tuple[float, float]], front: list[tuple[float, float]], labels: tuple[str, str],
           path: str | Path) -> None:  # fmt: skip
    """Every feasible point, with the non-dominated front drawn over them."""
    figure, axes = _figure()
    axes.scatter([x for x, _ in all_points], [y for _, y in all_points], color="lightgrey", label="feasible")
    ordered_front = sorted(front)
    axes.plot([x for x, _ in ordered_front], [y for _, y in ordered_front], "o-", color="tab:red", label="Pareto front")
    axes.set_xlabel(labels[0])
    axes.set_ylabel(labels[1])
    axes.set_title("Pareto front over all feasible deployments")
    _legend(axes)
    _save(figure, path)


def latency(names: list[str], ttft_ms: list[float], itl_ms: list[float], sla: tuple[float | None, float | None],
            path: str | Path) -> None:  # fmt: skip
    """Mean TTFT and ITL of the top deployments, side by side, against the SLA bounds."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    figure, (left, right) = pyplot.subplots(1, 2, figsize=(9, 4.2), dpi=110)
    for axes, values, bound, title in (
        (left, ttft_ms, sla[0], "mean TTFT (ms)"),
        (right, itl_ms, sla[1], "mean ITL (ms)"),
    ):
        axes.bar(names, values, color="tab:blue")
        if bound is not None:
            axes.axhline(bound, color="tab:red", linestyle="--", label=f"SLA {bound:g} ms")
            _legend(axes)
        axes.set_title(title)
        axes.set_xlabel("rank")
        axes.grid(True, axis="y", alpha=0.3)
    _save(figure, path)


def load_curve(curves: dict[str, list[tuple[float, float | None, float | None, bool]]], x_label: str, offered: float,
               sla: tuple[float | None, float | None], statistic: str, path: str | Path) -> None:  # fmt: skip
    """TTFT and ITL against load for each sized deployment (name -> [(load, ttft, itl, met the SLA)]); a load that
    missed the SLA is hollow, the offered load a grey line."""
    import matplotlib
    import matplotlib.ticker

    matplotlib.use("Agg")
    from matplotlib import pyplot

    figure, (left, right) = pyplot.subplots(1, 2, figsize=(9.5, 4.2), dpi=110)
    for column, (axes, bound, title) in enumerate(
        ((left, sla[0], f"{statistic} TTFT (ms)"), (right, sla[1], f"{statistic} ITL (ms)"))
    ):
        for colour, (name, points) in zip(pyplot.rcParams["axes.prop_cycle"].by_key()["color"], curves.items()):
            shown = [(load, values[column], met) for load, *values, met in points if values[column] is not None]
            if not shown:
                continue
            axes.plot([p[0] for p in shown], [p[1] for p in shown], color=colour, alpha=0.6, label=name)
            for load, value, met in shown:
                axes.scatter([load], [value], color=colour if met else "white", edgecolors=colour, zorder=3)
        axes.axvline(offered, color="grey", linestyle=":", label="offered load")
        if bound is not None:
            axes.axhline(bound, color="tab:red", linestyle="--", label=f"SLA {bound:g} ms")
        axes.set_xscale("log", base=2)
        axes.set_yscale("log")
        axes.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda value, _: f"{value:g}"))
        axes.set_xlabel(x_label)
        axes.set_title(title)
        axes.grid(True, alpha=0.3)
        _legend(axes)
    _save(figure, path)
