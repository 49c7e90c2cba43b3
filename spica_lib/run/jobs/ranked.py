"""A finished search read back once, for the jobs after it (finish, its shares, stress, capacity, baselines,
merge): config, histories, told trials, feasible deployments and their ranking.
"""

from __future__ import annotations

from typing import NamedTuple

from spica_lib.base.artifacts import read_model
from spica_lib.config import SmartSearchConfig
from spica_lib.config.validate import ValidatedConfig
from spica_lib.results.finish import sample_kind
from spica_lib.results.merge import (
    CandidateRow,
    collect_candidates,
    ordered,
    same_result_as,
)
from spica_lib.run.job_args import JobArgs
from spica_lib.run.layout import RunFiles
from spica_lib.search.history import BranchHistory
from spica_lib.trial.spec import TrialRecord, TrialSpec
from spica_lib.trial.store import read_trials


def told_records(files: RunFiles, histories: list[BranchHistory]) -> dict[str, TrialRecord]:
    """The trial records of every trial the histories told (key -> record)."""
    records: dict[str, TrialRecord] = {}
    for history in histories:
        records.update(read_trials(files.trial_files(history.deployment_mode, history.observations)))
    return records


class RankedRun(NamedTuple):
    """A finished search read once: config, branch histories, trials, feasible deployments and their ranking."""

    config: SmartSearchConfig
    histories: list[BranchHistory]
    records: dict[str, TrialRecord]
    rows: list[CandidateRow]
    best: list[CandidateRow]  # before the finish


def ranked_run(job: JobArgs) -> RankedRun:
    files = RunFiles(dir=job.params["run_dir"])
    config = read_model(job.input["config"], ValidatedConfig).config
    histories = [read_model(path, BranchHistory) for path in job.inputs("histories")]
    records = told_records(files, histories)
    rows = collect_candidates(histories, records)
    return RankedRun(config, histories, records, rows, ordered(config, rows))


def finish_top(run: RankedRun) -> dict[str, TrialSpec]:
    """The distinct top deployments the finish looks at (key -> spec, in ranking order): a row that replayed to
    exactly the metrics of a better-ranked one (`same_result_as`) is the same deployment for the finish."""
    sweep = run.config.sweep
    if sample_kind(run.config) is None:
        return {}
    distinct = [row for row, earlier in zip(run.best, same_result_as(run.best), strict=True) if earlier is None]
    return {row.key: run.records[row.key].spec for row in distinct[: sweep.finish_top]}
