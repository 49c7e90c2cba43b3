# The search: per branch and round, a checkpoint asks Vizier for candidates (suggest) and writes the
# round's new specs; replay jobs (all of a round's new trials in one job, or `trials_per_job` each)
# replay them in a warm worker; a tell rule appends the round to the branch history, which the next
# round's suggest reads. A replay job writes only its own rounds/<branch>/<k>/trials/<job>/ folder.
# When replays of a pass fail or time out, a refill checkpoint asks for replacements in the same round
# (rounds/<branch>/<k>/refill/<p>/); their replay jobs continue the round's job numbers, and tell waits
# for the last pass. Replay is a checkpoint so that tell can see whether another pass is needed; all of a
# pass's replay jobs are asked for at once, so they run side by side.
# With `sweep.rounds_in_flight` W > 1, round k's suggest waits for round k - W's tell, not round k - 1's,
# and reads the suggestions of the rounds in between (still replaying); tell still goes round by round.
import os

from snakemake.exceptions import IncompleteCheckpointException, WorkflowError

from spica_lib.base.artifacts import read_model
from spica_lib.run.time_limits import replay_job_minutes
from spica_lib.search.history import RoundSuggestions
from spica_lib.search.rounds import replacements_needed
from spica_lib.trial.store import read_trial


wildcard_constraints:
    branch=r"agg|disagg",
    round=r"\d+",
    batch=r"\d+",
    refill=r"\d+",


def previous_history(wildcards):
    """The history tell appends this round to: the round before's."""
    r = int(wildcards.round)
    return [] if r == 0 else [RUN.observations(wildcards.branch, r - 1)]


def told_history(wildcards):
    """The history the round is suggested from: round k - rounds_in_flight's (the round before's, by default)."""
    r = int(wildcards.round) - RUN.rounds_in_flight
    return [] if r < 0 else [RUN.observations(wildcards.branch, r)]


def rival_histories(wildcards):
    """The other branches' histories the round's prune bar counts too: told one round before the branch's
    own (round k - rounds_in_flight - 1), so a branch waits for another only when that one falls a whole
    round behind, and the bar still depends on the round number alone (search/rounds.py)."""
    r = int(wildcards.round) - RUN.rounds_in_flight - 1
    return [] if r < 0 else [RUN.observations(mode, r) for mode in RUN.modes if mode != wildcards.branch]


def rounds_in_flight(wildcards):
    """The first passes of the rounds suggested after that history and before this round (they replay now)."""
    r = int(wildcards.round)
    return [RUN.suggestions(wildcards.branch, j) for j in range(max(0, r - RUN.rounds_in_flight + 1), r)]


def replay_threads(wildcards, input):
    """`parallel_evals` replays at once across the sweep, split between the branches and the rounds in flight,
    so their jobs (and the warm-ups that dominate short replays) run side by side. A job built once every
    other branch is done (its last round told, and its share of the finish replayed) takes the others'
    share too: their cores would idle otherwise (on a real trace the agg branch ends its rounds well
    before disagg). Never more than the job's trials:
    a thread with no replay to run would hold a core another job could use. Threads change only how many
    replays run at once, never a result."""
    in_flight = RUN.rounds_in_flight
    others = [mode for mode in RUN.modes if mode != wildcards.branch]
    width = max(1, RUN.parallel_evals // (len(RUN.modes) * in_flight))
    # With finish shares, a branch that has told its last round holds its cores for its share until then.
    done = RUN.finish_share_json if RUN.finish_shares else (lambda mode: RUN.observations(mode, RUN.last_round))
    if all(os.path.exists(done(mode)) for mode in others):
        width = max(1, RUN.parallel_evals // in_flight)
    trials = len(read_model(input.suggestions, RoundSuggestions).batch(int(wildcards.batch)))
    return max(1, min(width, trials))


def trials_per_job():
    # A profile sets `set-resources: replay: trials_per_job: N` (the SLURM one does); locally a
    # round's new trials share one job, so Dynamo and the perf DB load once per round.
    value = workflow.resource_settings.overwrite_resources.get("replay", {}).get("trials_per_job")
    value = getattr(value, "value", value)  # Snakemake wraps a profile's resources
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise WorkflowError(f"set-resources replay:trials_per_job must be a whole number >= 1, got {value!r}")
    return value


def round_pass(branch, round_index, refill):
    """(suggestions file, its model) of pass `refill` of a round; raises until its checkpoint has run."""
    if int(refill) == 0:
        path = checkpoints.suggest.get(branch=branch, round=round_index).output.suggestions
    else:
        path = checkpoints.refill.get(branch=branch, round=round_index, refill=refill).output.suggestions
    return path, read_model(path, RoundSuggestions)


def pass_of_batch(wildcards):
    """The pass of the round whose replay jobs include job number `batch`."""
    batch, refill = int(wildcards.batch), 0
    while True:
        _, passed = round_pass(wildcards.branch, wildcards.round, refill)
        if batch in passed.batch_numbers():
            return refill
        if batch < passed.first_batch or not passed.new_keys:
            raise WorkflowError(f"round {wildcards.round} of {wildcards.branch} has no replay job {batch}")
        refill += 1


def batch_pass_files(wildcards):
    """The suggestions file and specs folder of the pass that holds replay job `batch` (found once per job)."""
    suggestions, specs = RUN.pass_files(wildcards.branch, wildcards.round, pass_of_batch(wildcards))
    return {"suggestions": suggestions, "specs": specs}


def round_walk(wildcards):
    """The round's passes (`suggestions`) and replay jobs (`trials` folders): its first pass, then one refill
    after another for as long as the last pass's replays failed and the round's cap allows. One walk
    gives both named inputs, so the trial files are read once per evaluation."""
    passes, paths, folders = [], [], []
    while True:
        path, passed = round_pass(wildcards.branch, wildcards.round, len(passes))
        passes.append(passed)
        paths.append(path)
        results, replaying = {}, False
        for batch in passed.batch_numbers():
            folder = RUN.trial_batch(wildcards.branch, wildcards.round, batch)
            folders.append(folder)
            try:
                checkpoints.replay.get(branch=wildcards.branch, round=wildcards.round, batch=batch)
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


def earlier_passes(wildcards):
    return [RUN.pass_files(wildcards.branch, wildcards.round, p)[0] for p in range(int(wildcards.refill))]


def earlier_trials(wildcards):
    folders = []
    for refill in range(int(wildcards.refill)):
        _, passed = round_pass(wildcards.branch, wildcards.round, refill)
        folders += [RUN.trial_batch(wildcards.branch, wildcards.round, b) for b in passed.batch_numbers()]
    return folders


checkpoint suggest:
    message:
        "Asking Vizier for round {wildcards.round} of branch {wildcards.branch}"
    input:
        config=rules.validate.output.config,
        predictor=rules.load_predictor.output.result,
        branch=RUN.branch_json("{branch}"),
        pool=RUN.pool_parquet("{branch}"),
        previous=told_history,
        in_flight=rounds_in_flight,
        rivals=rival_histories,
    output:
        suggestions=RUN.suggestions("{branch}", "{round}"),
        specs=directory(RUN.round_specs("{branch}", "{round}")),
    log:
        RUN.log("rounds/{branch}/{round}/suggest"),
    params:
        run_dir=RUN.dir,
        trials_per_job=trials_per_job(),
    localrule: job_is_local("suggest")
    script:
        "../../scripts/suggest.py"


checkpoint refill:
    message:
        "Asking Vizier for replacements of failed replays (round {wildcards.round} of {wildcards.branch}, pass {wildcards.refill})"
    input:
        config=rules.validate.output.config,
        predictor=rules.load_predictor.output.result,
        branch=RUN.branch_json("{branch}"),
        pool=RUN.pool_parquet("{branch}"),
        previous=told_history,
        in_flight=rounds_in_flight,
        passes=earlier_passes,
        trials=earlier_trials,
    output:
        suggestions=RUN.refill_suggestions("{branch}", "{round}", "{refill}"),
        specs=directory(RUN.refill_specs("{branch}", "{round}", "{refill}")),
    log:
        RUN.log("rounds/{branch}/{round}/refill/{refill}"),
    params:
        run_dir=RUN.dir,
        trials_per_job=trials_per_job(),
    localrule: job_is_local("refill")
    script:
        "../../scripts/refill.py"


# A replay job that dies without writing its folder was killed from outside (SLURM time limit, node
# failure, scancel, OOM): our own timeouts and replay errors are always written as results. Snakemake
# retries it; on the last allowed attempt a trial an earlier job started and never finished is
# recorded as killed instead of replayed again, so the round can close.
def last_replay_attempt(wildcards):
    # Cluster jobs run Snakemake with --retries 0, so the main process, which evaluates this before it
    # submits, hands its count down through the environment (sbatch exports it to the job).
    # `snakemake --report` builds the DAG without execution settings: nothing is retried there.
    settings = workflow.execution_settings
    os.environ.setdefault("SPICA_TRIAL_RETRIES", str(settings.retries if settings is not None else 0))
    return int(os.environ["SPICA_TRIAL_RETRIES"]) + 1


def replay_runtime(wildcards, input, threads):
    """Minutes: the job's trials on every workload, in waves of `threads` (spica_lib/run/time_limits.py)."""
    trials = len(read_model(input.suggestions, RoundSuggestions).batch(int(wildcards.batch)))
    return replay_job_minutes(trials, RUN.workloads, threads, RUN.max_eval_seconds)


checkpoint replay:
    message:
        "Replaying job {wildcards.batch} of round {wildcards.round} of {wildcards.branch}"
    input:
        unpack(batch_pass_files),
    output:
        trials=directory(RUN.trial_batch("{branch}", "{round}", "{batch}")),
    log:
        RUN.log("rounds/{branch}/{round}/replay/{batch}"),
    params:
        run_dir=RUN.dir,
        max_eval_seconds=RUN.max_eval_seconds,
        last_attempt=last_replay_attempt,
    threads: replay_threads
    resources:
        mem_mb=job_mem_mb("replay"),
        runtime=replay_runtime,
        trial_attempt=lambda wildcards, attempt: attempt,  # 1, then +1 per retry (params cannot see it)
    localrule: job_is_local("replay")  # with pilots, a rule script here hands the job to one
    script:
        "../../scripts/replay.py"


rule tell:
    message:
        "Collecting round {wildcards.round} of branch {wildcards.branch}"
    input:
        unpack(round_walk),
        config=rules.validate.output.config,
        previous=previous_history,
    output:
        history=RUN.observations("{branch}", "{round}"),
    log:
        RUN.log("rounds/{branch}/{round}/tell"),
    params:
        run_dir=RUN.dir,
    localrule: job_is_local("tell")
    script:
        "../../scripts/tell.py"
