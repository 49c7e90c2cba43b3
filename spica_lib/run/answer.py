"""The run's answer, as `spica run` ends with it and `spica status` shows it again: summary.json's `line` (the
counts and the best score, fresh first; the finish's verdict; the simulator's error; the baselines) and where the
report and the recommendation's deployment files are."""

from __future__ import annotations

from pathlib import Path

from spica_lib.base.artifacts import read_model
from spica_lib.results.summary import SweepSummary
from spica_lib.run.layout import RunFiles


def answer_block(run_dir: str | Path) -> str | None:
    """The answer of a run whose merge stage has written summary.json; None before."""
    files = RunFiles(dir=str(run_dir))
    if not Path(files.summary_json).is_file():
        return None
    lines = [read_model(files.summary_json, SweepSummary).line]
    report = files.report_file("report.md")
    if Path(report).is_file():
        lines.append(f"report: {report}")
    first = files.deployment(1)
    if Path(first).is_dir():
        lines.append(f"deployment files of #1: {first}/ (Kubernetes and SLURM; `spica rehearse {run_dir}` tries it first)")
    return "\n".join(lines)


def no_feasible_candidate(run_dir: str | Path) -> str | None:
    """Why a finished sweep has nothing to rank (from its summary.json), or None when it has something."""
    files = RunFiles(dir=str(run_dir))
    if not Path(files.summary_json).is_file():
        return None  # a partial target (e.g. `--until branches`) was asked for: nothing to judge
    summary = read_model(files.summary_json, SweepSummary)
    if summary.best_score is not None:
        return None
    return f"spica: the sweep found no feasible candidate ({files.summary_json}):\n{summary.line}"


def recommendation_line(run_dir: str | Path) -> str:
    """The recommendation's score, fresh first and the search's beside it, each named: `spica status`'s lead."""
    from spica_lib.run.view import RunView
    from spica_lib.trial.describe import describe
    from spica_lib.trial.score import score_text

    view = RunView(run_dir)
    summary, target = view.summary, view.config.goal.target
    if summary is None or not view.ranked:
        return "no deployment to recommend"
    first = view.ranked[0]
    name = describe(view.records[first.key].spec)
    finish = first.finish
    if finish is not None and finish.statistic is not None:
        return (f"recommended: #1 {name}: {score_text(finish.statistic, target)} fresh ({view.config.goal.robustness} of "
                f"{finish.scored} fresh sample(s)); {score_text(first.candidate.score, target, name=False)} on the "
                "search's sample")  # fmt: skip
    return f"recommended: #1 {name}: {score_text(first.candidate.score, target)} on the search's sample"


def fresh_bests(run_dir: str | Path) -> dict[str, str]:
    """Per branch, its best finished deployment on the fresh samples, in words (a branch none reached: absent)."""
    from spica_lib.run.view import RunView
    from spica_lib.trial.score import score_text

    view = RunView(run_dir)
    out: dict[str, str] = {}
    for rank, row in enumerate(view.ranked, start=1):
        finish = row.finish
        if row.branch not in out and finish is not None and finish.statistic is not None:
            out[row.branch] = f"best fresh {score_text(finish.statistic, view.config.goal.target)} (#{rank})"
    return out
