"""`spica status`: how far a run is, read from its files only, so it works while the sweep runs.

A trial counts as finished once its journal entry exists (written before its trial file), as
running while its started marker has no journal entry, and as failed when it finished failed or
timed out. A round is suggested once its suggestions.json exists and told once its observations.json does.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict

from spica_lib.base.artifacts import read_model
from spica_lib.config.validate import ValidatedConfig
from spica_lib.run.layout import RunFiles
from spica_lib.search.history import RoundSuggestions
from spica_lib.trial.score import score_text
from spica_lib.trial.store import read_trial


class BranchStatus(BaseModel):
    model_config = ConfigDict(extra="forbid")

    branch: str
    rounds_told: int
    rounds_total: int
    stalled: bool
    trials_finished: int
    trials_running: int
    trials_failed: int
    best_score: float | None
    best_key: str | None


def run_status(run_dir: str | Path) -> list[BranchStatus]:
    files = RunFiles(dir=str(run_dir))
    config = read_model(files.config_json, ValidatedConfig).config
    return [
        _branch_status(files, mode, config.sweep.max_rounds)
        for mode in dict.fromkeys(config.search_space.deployment_mode)
    ]


def _branch_status(files: RunFiles, mode: str, max_rounds: int) -> BranchStatus:
    told, stalled, keys = 0, False, []
    for round_index in range(max_rounds):
        suggestions = Path(files.suggestions(mode, round_index))
        if not suggestions.is_file():
            break
        round_file = read_model(suggestions, RoundSuggestions)
        stalled = stalled or round_file.skipped is not None
        keys += round_file.new_keys
        refill = 1
        while Path(files.refill_suggestions(mode, round_index, refill)).is_file():  # replacements of failed replays
            keys += read_model(files.refill_suggestions(mode, round_index, refill), RoundSuggestions).new_keys
            refill += 1
        told += Path(files.observations(mode, round_index)).is_file()
    finished, running, failed = 0, 0, 0
    best: tuple[float, str] | None = None
    for key in dict.fromkeys(keys):
        if Path(files.journal(key)).is_file():
            result = read_trial(files.journal(key)).result
            finished += 1
            failed += result.status in ("failed", "timed_out")
            if result.status == "feasible" and result.score is not None and (best is None or result.score > best[0]):
                best = (result.score, key)
        elif Path(files.started(key)).is_file():
            running += 1
    return BranchStatus(
        branch=mode,
        rounds_told=told,
        rounds_total=max_rounds,
        stalled=stalled,
        trials_finished=finished,
        trials_running=running,
        trials_failed=failed,
        best_score=best[0] if best else None,
        best_key=best[1] if best else None,
    )


def status_text(run_dir: str | Path, statuses: list[BranchStatus]) -> str:
    target = read_model(RunFiles(dir=str(run_dir)).config_json, ValidatedConfig).config.goal.target
    lines = [f"{run_dir}:"]
    for s in statuses:
        best = f"best {score_text(s.best_score, target)} ({s.best_key[:12]})" if s.best_key else "no feasible trial yet"
        state = ", stalled" if s.stalled else ""
        lines.append(
            f"  {s.branch:<7} rounds {s.rounds_told}/{s.rounds_total}{state}; trials finished {s.trials_finished}, "
            f"running {s.trials_running}, failed {s.trials_failed}; {best}"
        )
    return "\n".join(lines)
