"""`spica status`: how far a run is, read from its files only, so it works while the sweep runs.

A trial counts as finished once its journal entry exists (written before its trial file), and as
failed when it finished failed or timed out. A started marker with no journal entry is a trial
running, when the sweep's Snakemake is alive and started it; a stopped sweep's are interrupted
(`spica run` replays them). A round is suggested once its suggestions.json exists and told once
its observations.json does.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict

from spica_lib.base.artifacts import read_model
from spica_lib.config.validate import ValidatedConfig
from spica_lib.run.layout import RunFiles
from spica_lib.run.sweep_process import SweepState, running_process, sweep_state
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
    trials_interrupted: int  # started by a sweep that is gone, never finished
    trials_failed: int
    best_score: float | None
    best_key: str | None


class RunStatus(BaseModel):
    model_config = ConfigDict(extra="forbid")

    state: SweepState
    snakemake: str | None  # "pid N on HOST" while it runs
    branches: list[BranchStatus]


def run_status(run_dir: str | Path) -> RunStatus:
    files = RunFiles(dir=str(run_dir))
    config = read_model(files.config_json, ValidatedConfig).config
    state = sweep_state(run_dir, files.manifest_json)
    process = running_process(run_dir)
    # A marker counts as running only if this sweep's Snakemake wrote it (not one it replaced).
    live_since = process.process_started if process is not None and state.startswith("running") else None
    return RunStatus(
        state=state,
        snakemake=f"pid {process.pid} on {process.host}" if process is not None and live_since else None,
        branches=[
            _branch_status(files, mode, config.sweep.max_rounds, live_since)
            for mode in dict.fromkeys(config.search_space.deployment_mode)
        ],
    )


def _branch_status(files: RunFiles, mode: str, max_rounds: int, live_since: float | None) -> BranchStatus:
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
    finished, running, interrupted, failed = 0, 0, 0, 0
    best: tuple[float, str] | None = None
    for key in dict.fromkeys(keys):
        if Path(files.journal(key)).is_file():
            result = read_trial(files.journal(key)).result
            finished += 1
            failed += result.status in ("failed", "timed_out")
            if result.status == "feasible" and result.score is not None and (best is None or result.score > best[0]):
                best = (result.score, key)
        elif Path(files.started(key)).is_file():
            if live_since is not None and Path(files.started(key)).stat().st_mtime >= live_since:
                running += 1
            else:
                interrupted += 1
    return BranchStatus(
        branch=mode,
        rounds_told=told,
        rounds_total=max_rounds,
        stalled=stalled,
        trials_finished=finished,
        trials_running=running,
        trials_interrupted=interrupted,
        trials_failed=failed,
        best_score=best[0] if best else None,
        best_key=best[1] if best else None,
    )


STATE_TEXT = {
    "running": "running ({snakemake})",
    "running elsewhere": "running ({snakemake}; cannot check from this host)",
    "stopped": "stopped: its Snakemake is gone; `spica run` with the same config resumes it",
    "finished": "finished",
    "not started": "not started",
}


def status_text(run_dir: str | Path, status: RunStatus) -> str:
    target = read_model(RunFiles(dir=str(run_dir)).config_json, ValidatedConfig).config.goal.target
    lines = [f"{run_dir}: {STATE_TEXT[status.state].format(snakemake=status.snakemake)}"]
    for s in status.branches:
        best = f"best {score_text(s.best_score, target)} ({s.best_key[:12]})" if s.best_key else "no feasible trial yet"
        state = ", stalled" if s.stalled else ""
        lines.append(
            f"  {s.branch:<7} rounds {s.rounds_told}/{s.rounds_total}{state}; trials finished {s.trials_finished}, "
            f"running {s.trials_running}, "
            + (f"interrupted {s.trials_interrupted}, " if s.trials_interrupted else "")
            + f"failed {s.trials_failed}; {best}"
        )
    return "\n".join(lines)
