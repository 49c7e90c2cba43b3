"""A finished run read back from its files: config, histories, trial records and the ranked rows.

Every table and plot of the report is computed here as plain data (so tests check what is
plotted, not pixels), from the same ranking code the merge stage uses.
"""

from __future__ import annotations

import math
from functools import cached_property
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from spica_lib.base.artifacts import read_model
from spica_lib.config.validate import ValidatedConfig
from spica_lib.results.capacity import CapacityResult
from spica_lib.results.finish import FinishResult
from spica_lib.results.merge import CandidateRow, apply_finish, collect_candidates, ordered
from spica_lib.results.stress import StressResult
from spica_lib.results.summary import SweepSummary
from spica_lib.run.layout import RunFiles
from spica_lib.search.history import BranchHistory
from spica_lib.trial.score import sla_miss
from spica_lib.trial.spec import TrialRecord
from spica_lib.trial.store import read_trials


class Point(BaseModel):
    """One feasible deployment on the trade-off plot."""

    model_config = ConfigDict(frozen=True)

    key: str
    branch: str
    used_gpus: int
    score: float
    misses_sla: bool


class BestSoFar(BaseModel):
    model_config = ConfigDict(frozen=True)

    trial: int  # 1-based position among the branch's observations
    round: int
    best: float | None  # None until the branch's first feasible trial


class RunView:
    """Read-only access to one run folder (it must hold config.json and, to report, the round histories)."""

    def __init__(self, run_dir: str | Path):
        self.files = RunFiles(dir=str(run_dir))
        self.validated = read_model(self.files.config_json, ValidatedConfig)
        self.config = self.validated.config

    @cached_property
    def histories(self) -> list[BranchHistory]:
        """The latest history of each branch (the last round told so far)."""
        out = []
        for mode in dict.fromkeys(self.config.search_space.deployment_mode):
            for round_index in reversed(range(self.config.sweep.max_rounds)):
                path = Path(self.files.observations(mode, round_index))
                if path.is_file():
                    out.append(read_model(path, BranchHistory))
                    break
        return out

    @cached_property
    def records(self) -> dict[str, TrialRecord]:
        out: dict[str, TrialRecord] = {}
        for history in self.histories:
            out.update(read_trials(self.files.trial_files(history.deployment_mode, history.observations)))
        return out

    @cached_property
    def rows(self) -> list[CandidateRow]:
        """Every feasible deployment, once."""
        return collect_candidates(self.histories, self.records)

    @cached_property
    def ranked(self) -> list[CandidateRow]:
        """Best first (scalar goal) or the Pareto front (Pareto goal), exactly as the merge stage ranks."""
        best = ordered(self.config, self.rows)
        finish = Path(self.files.finish_json)
        return apply_finish(best, read_model(finish, FinishResult)) if finish.is_file() else best

    @property
    def stress(self) -> StressResult | None:
        path = Path(self.files.stress_json)
        return read_model(path, StressResult) if path.is_file() else None

    @property
    def capacity(self) -> CapacityResult | None:
        path = Path(self.files.capacity_json)
        return read_model(path, CapacityResult) if path.is_file() else None

    @property
    def summary(self) -> SweepSummary | None:
        path = Path(self.files.summary_json)
        return read_model(path, SweepSummary) if path.is_file() else None

    def misses_sla(self, row: CandidateRow) -> bool:
        goal = self.config.goal
        return goal.sla is not None and sla_miss(row.candidate.metrics, goal) > 1.0

    def tradeoff_points(self) -> list[Point]:
        return [
            Point(
                key=row.key,
                branch=row.branch,
                used_gpus=row.candidate.used_gpus,
                score=row.candidate.score,
                misses_sla=self.misses_sla(row),
            )
            for row in self.rows
        ]

    def convergence(self) -> dict[str, list[BestSoFar]]:
        """Per branch, the best score so far after each observation (cache hits and failures included)."""
        out: dict[str, list[BestSoFar]] = {}
        for history in self.histories:
            best: float | None = None
            series = []
            for position, observation in enumerate(history.observations, start=1):
                record = self.records.get(observation.key or "")
                if record is not None and record.result.status == "feasible" and record.result.score is not None:
                    score = record.result.score
                    best = score if best is None or score > best else best
                series.append(BestSoFar(trial=position, round=observation.round, best=best))
            out[history.deployment_mode] = series
        return out

    def latency_rows(self, top: int) -> list[tuple[CandidateRow, float, float]]:
        """The top candidates with their mean TTFT and mean ITL (ms); NaN where the replay gave none."""
        metrics = [(row, row.candidate.metrics) for row in self.ranked[:top]]
        return [(row, m.get("mean_ttft_ms", math.nan), m.get("mean_itl_ms", math.nan)) for row, m in metrics]
