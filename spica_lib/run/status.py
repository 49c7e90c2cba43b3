"""`spica status`: how far a run is, read from its files only, so it works while the sweep runs.

A trial counts as finished once its journal entry exists (written before its trial file), and as
failed when it finished failed or timed out. A started marker with no journal entry is a trial
running, when the sweep's Snakemake is alive and started it; a stopped sweep's are interrupted
(`spica run` replays them). A round is suggested once its suggestions.json exists and told once
its observations.json does.

Progress: the trials a branch will run are those suggested so far plus a round's worth
(`sweep.candidates_per_round`) for each round not suggested yet (none once it stalls). While the
sweep runs, what remains is estimated at this invocation's own pace: the trials it finished over
the wall time since its Snakemake started, which counts replays, their parallelism and the
overheads between rounds alike. The finish, stress, capacity and baseline stages come after and are not in it.
"""

from __future__ import annotations

import time
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from spica_lib.base.artifacts import read_model
from spica_lib.config.validate import ValidatedConfig
from spica_lib.results.summary import early_stop_rule
from spica_lib.run.answer import answer_block, fresh_bests, recommendation_line
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
    trials_stopped_early: int = 0  # ended before their replay's end on a sound bound (pruned, certain misses, stalls)
    trials_expected: int = 0  # suggested so far, plus a round's worth per round still to suggest
    trials_finished_this_run: int = 0  # finished by the sweep running now (its journal written since it started)
    replay_seconds: float = 0.0  # the finished trials' replay time, summed
    best_score: float | None
    best_key: str | None


class RunStatus(BaseModel):
    model_config = ConfigDict(extra="forbid")

    state: SweepState
    snakemake: str | None  # "pid N on HOST" while it runs
    branches: list[BranchStatus]
    running_seconds: float | None = None  # wall time since the running sweep's Snakemake started
    remaining_seconds: float | None = None  # the search's trials left at this invocation's pace (None: no pace yet)

    @property
    def trials_finished(self) -> int:
        return sum(b.trials_finished for b in self.branches)

    @property
    def trials_expected(self) -> int:
        return sum(max(b.trials_expected, b.trials_finished) for b in self.branches)


def run_status(run_dir: str | Path) -> RunStatus:
    files = RunFiles(dir=str(run_dir))
    config = read_model(files.config_json, ValidatedConfig).config
    state = sweep_state(run_dir, files.manifest_json)
    process = running_process(run_dir)
    # A marker counts as running only if this sweep's Snakemake wrote it (not one it replaced).
    live_since = process.process_started if process is not None and state.startswith("running") else None
    branches = [
        _branch_status(files, mode, config.sweep.max_rounds, config.sweep.per_round, live_since)
        for mode in dict.fromkeys(config.search_space.deployment_mode)
    ]
    status = RunStatus(
        state=state,
        snakemake=f"pid {process.pid} on {process.host}" if process is not None and live_since else None,
        branches=branches,
    )
    if live_since is not None:
        status.running_seconds = max(0.0, time.time() - live_since)
        status.remaining_seconds = _remaining(status)
    return status


def _remaining(status: RunStatus) -> float | None:
    """The search's trials left, at the pace of the trials this invocation finished (None before its first)."""
    done_here = sum(b.trials_finished_this_run for b in status.branches)
    left = status.trials_expected - status.trials_finished
    if left <= 0:
        return 0.0
    if not done_here or not status.running_seconds:
        return None
    return left * status.running_seconds / done_here


def _branch_status(
    files: RunFiles, mode: str, max_rounds: int, per_round: int, live_since: float | None
) -> BranchStatus:
    told, stalled, keys, suggested = 0, False, [], 0
    for round_index in range(max_rounds):
        suggestions = Path(files.suggestions(mode, round_index))
        if not suggestions.is_file():
            break
        round_file = read_model(suggestions, RoundSuggestions)
        stalled = stalled or round_file.skipped is not None
        suggested += 1
        keys += round_file.new_keys
        refill = 1
        while Path(files.refill_suggestions(mode, round_index, refill)).is_file():  # replacements of failed replays
            keys += read_model(files.refill_suggestions(mode, round_index, refill), RoundSuggestions).new_keys
            refill += 1
        told += Path(files.observations(mode, round_index)).is_file()
    finished, running, interrupted, failed, stopped_early, here, replay_seconds = 0, 0, 0, 0, 0, 0, 0.0
    best: tuple[float, str] | None = None
    for key in dict.fromkeys(keys):
        journal = Path(files.journal(key))
        if journal.is_file():
            result = read_trial(journal).result
            finished += 1
            replay_seconds += result.replay_seconds
            here += live_since is not None and journal.stat().st_mtime >= live_since
            failed += result.status in ("failed", "timed_out")
            stopped_early += early_stop_rule(result) is not None
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
        trials_stopped_early=stopped_early,
        trials_expected=len(dict.fromkeys(keys)) + (0 if stalled else (max_rounds - suggested) * per_round),
        trials_finished_this_run=here,
        replay_seconds=replay_seconds,
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
    """How far the run is; a finished run's answer first (its fresh numbers, the search's beside them) and last."""
    target = read_model(RunFiles(dir=str(run_dir)).config_json, ValidatedConfig).config.goal.target
    lines = [f"{run_dir}: {STATE_TEXT[status.state].format(snakemake=status.snakemake)}"]
    answer = answer_block(run_dir) if status.state == "finished" else None
    fresh = fresh_bests(run_dir) if answer else {}
    if answer:
        lines.append(f"  {recommendation_line(run_dir)}")
    for s in status.branches:
        best = (f"best on the search's sample {score_text(s.best_score, target)} ({s.best_key[:12]})"
                if s.best_key else "no feasible trial yet")  # fmt: skip
        if s.branch in fresh:
            best = f"{fresh[s.branch]}; {best}"
        state = ", stalled" if s.stalled else ""
        lines.append(
            f"  {s.branch:<7} rounds {s.rounds_told}/{s.rounds_total}{state}; trials finished {s.trials_finished}, "
            f"running {s.trials_running}, "
            + (f"interrupted {s.trials_interrupted}, " if s.trials_interrupted else "")
            + f"failed {s.trials_failed}; {best}"
        )
    lines.append(f"  progress: {progress_text(status)}")
    if answer:
        lines += ["", answer]
    return "\n".join(lines)


def progress_text(status: RunStatus) -> str:
    """Trials done of those the search will run, replay time spent, and (while it runs) what remains."""
    running = sum(b.trials_running for b in status.branches)
    replay = sum(b.replay_seconds for b in status.branches)
    text = (f"{status.trials_finished} of about {status.trials_expected} trials done"
            + (f", {running} running" if running else "") + f"; {duration_text(replay)} of replays")  # fmt: skip
    if status.remaining_seconds is None:
        return text + ("; time left: not known until a trial of this run ends" if status.running_seconds else "")
    if status.remaining_seconds == 0:
        return text + "; the search's trials are done"
    return text + f"; about {duration_text(status.remaining_seconds)} left for the search's trials at this run's pace"


def duration_text(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
