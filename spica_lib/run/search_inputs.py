"""What the search's rules (workflow/rules/search.smk) ask while Snakemake builds the DAG: the histories each
round is suggested from and told onto, its passes and replay jobs, each replay job's threads and time limit.

Per branch and round, a checkpoint asks Vizier for candidates (suggest) and writes the round's new specs; replay
jobs (all of a round's new trials in one job, or `trials_per_job` each) replay them in a warm worker; a tell rule
appends the round to the branch history, which the next round's suggest reads. A replay job writes only its own
rounds/<branch>/<k>/trials/<job>/ folder. When replays of a pass fail or time out, a refill checkpoint asks for
replacements in the same round (rounds/<branch>/<k>/refill/<p>/); their replay jobs continue the round's job
numbers, and tell waits for the last pass. Replay is a checkpoint so that tell can see whether another pass is
needed; all of a pass's replay jobs are asked for at once, so they run side by side. With
`sweep.rounds_in_flight` W > 1, round k's suggest waits for round k - W's tell, not round k - 1's, and reads the
suggestions of the rounds in between (still replaying); tell still goes round by round.
"""

from __future__ import annotations

import os
from typing import Any

from snakemake.exceptions import IncompleteCheckpointException, WorkflowError

from spica_lib.base.artifacts import read_model
from spica_lib.run.layout import RunLayout
from spica_lib.run.time_limits import replay_job_minutes
from spica_lib.search.history import RoundSuggestions
from spica_lib.search.rounds import replacements_needed
from spica_lib.trial.store import read_trial

RETRIES_VARIABLE = "SPICA_TRIAL_RETRIES"  # the main invocation's retry count, for a cluster job's own Snakemake


class SearchInputs:
    """The search rules' input functions, for the run `run` planned in the Snakefile. `checkpoints` and
    `workflow` are the Snakefile's own (the checkpoints are looked up when asked, once their rules exist)."""

    def __init__(self, run: RunLayout, checkpoints: Any, workflow: Any):
        self.run, self.checkpoints, self.workflow = run, checkpoints, workflow

    def previous_history(self, wildcards: Any) -> list[str]:
        """The history tell appends this round to: the round before's."""
        r = int(wildcards.round)
        return [] if r == 0 else [self.run.observations(wildcards.branch, r - 1)]

    def told_history(self, wildcards: Any) -> list[str]:
        """The history the round is suggested from: round k - rounds_in_flight's (the round before's, by default)."""
        r = int(wildcards.round) - self.run.rounds_in_flight
        return [] if r < 0 else [self.run.observations(wildcards.branch, r)]

    def rival_histories(self, wildcards: Any) -> list[str]:
        """The other branches' histories the round's prune bar counts too: told one round before the branch's
        own (round k - rounds_in_flight - 1), so a branch waits for another only when that one falls a whole
        round behind, and the bar still depends on the round number alone (search/rounds.py)."""
        r = int(wildcards.round) - self.run.rounds_in_flight - 1
        return [] if r < 0 else [self.run.observations(mode, r) for mode in self.run.modes if mode != wildcards.branch]

    def rounds_in_flight(self, wildcards: Any) -> list[str]:
        """The first passes of the rounds suggested after that history and before this round (they replay now)."""
        r = int(wildcards.round)
        start = max(0, r - self.run.rounds_in_flight + 1)
        return [self.run.suggestions(wildcards.branch, j) for j in range(start, r)]

    def replay_threads(self, wildcards: Any, input: Any) -> int:
        """`parallel_evals` replays at once across the sweep, split between the branches and the rounds in flight,
        so their jobs (and the warm-ups that dominate short replays) run side by side. A job built once every
        other branch is done (its last round told, and its share of the finish replayed) takes the others'
        share too: their cores would idle otherwise (on a real trace the agg branch ends its rounds well
        before disagg). Never more than the job's trials: a thread with no replay to run would hold a core
        another job could use. Threads change only how many replays run at once, never a result."""
        run = self.run
        in_flight = run.rounds_in_flight
        others = [mode for mode in run.modes if mode != wildcards.branch]
        width = max(1, run.parallel_evals // (len(run.modes) * in_flight))
        # With finish shares, a branch that has told its last round holds its cores for its share until then.
        done = run.finish_share_json if run.finish_shares else (lambda mode: run.observations(mode, run.last_round))
        if all(os.path.exists(done(mode)) for mode in others):
            width = max(1, run.parallel_evals // in_flight)
        trials = len(read_model(input.suggestions, RoundSuggestions).batch(int(wildcards.batch)))
        return max(1, min(width, trials))

    def trials_per_job(self) -> int | None:
        """A profile sets `set-resources: replay: trials_per_job: N` (the SLURM one does); locally a round's new
        trials share one job, so Dynamo and the perf DB load once per round."""
        value = self.workflow.resource_settings.overwrite_resources.get("replay", {}).get("trials_per_job")
        value = getattr(value, "value", value)  # Snakemake wraps a profile's resources
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise WorkflowError(f"set-resources replay:trials_per_job must be a whole number >= 1, got {value!r}")
        return value

    def round_pass(self, branch: str, round_index: str, refill: int | str) -> tuple[str, RoundSuggestions]:
        """(suggestions file, its model) of pass `refill` of a round; raises until its checkpoint has run."""
        if int(refill) == 0:
            path = self.checkpoints.suggest.get(branch=branch, round=round_index).output.suggestions
        else:
            path = self.checkpoints.refill.get(branch=branch, round=round_index, refill=refill).output.suggestions
        return path, read_model(path, RoundSuggestions)

    def pass_of_batch(self, wildcards: Any) -> int:
        """The pass of the round whose replay jobs include job number `batch`."""
        batch, refill = int(wildcards.batch), 0
        while True:
            _, passed = self.round_pass(wildcards.branch, wildcards.round, refill)
            if batch in passed.batch_numbers():
                return refill
            if batch < passed.first_batch or not passed.new_keys:
                raise WorkflowError(f"round {wildcards.round} of {wildcards.branch} has no replay job {batch}")
            refill += 1

    def batch_pass_files(self, wildcards: Any) -> dict[str, str]:
        """The suggestions file and specs folder of the pass that holds replay job `batch` (found once per job)."""
        suggestions, specs = self.run.pass_files(wildcards.branch, wildcards.round, self.pass_of_batch(wildcards))
        return {"suggestions": suggestions, "specs": specs}

    def round_walk(self, wildcards: Any) -> dict[str, list[str]]:
        """The round's passes (`suggestions`) and replay jobs (`trials` folders): its first pass, then one refill
        after another for as long as the last pass's replays failed and the round's cap allows. One walk
        gives both named inputs, so the trial files are read once per evaluation."""
        passes, paths, folders = [], [], []
        while True:
            path, passed = self.round_pass(wildcards.branch, wildcards.round, len(passes))
            passes.append(passed)
            paths.append(path)
            results, replaying = {}, False
            for batch in passed.batch_numbers():
                folder = self.run.trial_batch(wildcards.branch, wildcards.round, batch)
                folders.append(folder)
                try:
                    self.checkpoints.replay.get(branch=wildcards.branch, round=wildcards.round, batch=batch)
                except IncompleteCheckpointException:
                    replaying = True  # not raised: every replay job of the pass must be asked for at once
                    continue
                results.update({key: read_trial(f"{folder}/{key}.json").result for key in passed.batch(batch)})
            if replaying:
                # The pass's folders as plain inputs: Snakemake runs all its replay jobs side by side (one raise
                # would add one job, and tell would meet the next only after it ended), and evaluates this again
                # when each of them ends, since tell depends on them.
                return {"suggestions": paths, "trials": folders}
            if not passed.new_keys or not replacements_needed(passes, results):
                return {"suggestions": paths, "trials": folders}

    def earlier_passes(self, wildcards: Any) -> list[str]:
        return [self.run.pass_files(wildcards.branch, wildcards.round, p)[0] for p in range(int(wildcards.refill))]

    def earlier_trials(self, wildcards: Any) -> list[str]:
        folders = []
        for refill in range(int(wildcards.refill)):
            _, passed = self.round_pass(wildcards.branch, wildcards.round, refill)
            folders += [self.run.trial_batch(wildcards.branch, wildcards.round, b) for b in passed.batch_numbers()]
        return folders

    def last_replay_attempt(self, wildcards: Any) -> int:
        """A replay job that dies without writing its folder was killed from outside (SLURM time limit, node
        failure, scancel, OOM): our own timeouts and replay errors are always written as results. Snakemake
        retries it; on the last allowed attempt a trial an earlier job started and never finished is recorded as
        killed instead of replayed again, so the round can close. Cluster jobs run Snakemake with --retries 0, so
        the main process, which evaluates this before it submits, hands its count down through the environment
        (sbatch exports it to the job). `snakemake --report` builds the DAG without execution settings: nothing
        is retried there."""
        settings = self.workflow.execution_settings
        os.environ.setdefault(RETRIES_VARIABLE, str(settings.retries if settings is not None else 0))
        return int(os.environ[RETRIES_VARIABLE]) + 1

    def replay_runtime(self, wildcards: Any, input: Any, threads: int) -> int:
        """Minutes: the job's trials on every workload, in waves of `threads` (spica_lib/run/time_limits.py)."""
        trials = len(read_model(input.suggestions, RoundSuggestions).batch(int(wildcards.batch)))
        return replay_job_minutes(trials, self.run.workloads, threads, self.run.max_eval_seconds)
