# The search's rules: suggest, refill, replay, tell. Their input functions, threads and time limits are
# spica_lib/run/search_inputs.py's (its docstring says how the rounds, passes and replay jobs fit together).
from spica_lib.run.search_inputs import SearchInputs

SEARCH = SearchInputs(RUN, checkpoints, workflow)


wildcard_constraints:
    branch=r"agg|disagg",
    round=r"\d+",
    batch=r"\d+",
    refill=r"\d+",


checkpoint suggest:
    message:
        "Asking Vizier for round {wildcards.round} of branch {wildcards.branch}"
    input:
        config=rules.validate.output.config,
        predictor=rules.load_predictor.output.result,
        branch=RUN.branch_json("{branch}"),
        pool=RUN.pool_parquet("{branch}"),
        previous=SEARCH.told_history,
        in_flight=SEARCH.rounds_in_flight,
        rivals=SEARCH.rival_histories,
    output:
        suggestions=RUN.suggestions("{branch}", "{round}"),
        specs=directory(RUN.round_specs("{branch}", "{round}")),
    log:
        RUN.log("rounds/{branch}/{round}/suggest"),
    params:
        run_dir=RUN.dir,
        trials_per_job=SEARCH.trials_per_job(),
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
        previous=SEARCH.told_history,
        in_flight=SEARCH.rounds_in_flight,
        passes=SEARCH.earlier_passes,
        trials=SEARCH.earlier_trials,
    output:
        suggestions=RUN.refill_suggestions("{branch}", "{round}", "{refill}"),
        specs=directory(RUN.refill_specs("{branch}", "{round}", "{refill}")),
    log:
        RUN.log("rounds/{branch}/{round}/refill/{refill}"),
    params:
        run_dir=RUN.dir,
        trials_per_job=SEARCH.trials_per_job(),
    localrule: job_is_local("refill")
    script:
        "../../scripts/refill.py"


checkpoint replay:
    message:
        "Replaying job {wildcards.batch} of round {wildcards.round} of {wildcards.branch}"
    input:
        unpack(SEARCH.batch_pass_files),
    output:
        trials=directory(RUN.trial_batch("{branch}", "{round}", "{batch}")),
    log:
        RUN.log("rounds/{branch}/{round}/replay/{batch}"),
    params:
        run_dir=RUN.dir,
        max_eval_seconds=RUN.max_eval_seconds,
        last_attempt=SEARCH.last_replay_attempt,
    threads: SEARCH.replay_threads
    resources:
        mem_mb=job_mem_mb("replay"),
        runtime=SEARCH.replay_runtime,
        trial_attempt=lambda wildcards, attempt: attempt,  # 1, then +1 per retry (params cannot see it)
    localrule: job_is_local("replay")  # with pilots, a rule script here hands the job to one
    script:
        "../../scripts/replay.py"


rule tell:
    message:
        "Collecting round {wildcards.round} of branch {wildcards.branch}"
    input:
        unpack(SEARCH.round_walk),
        config=rules.validate.output.config,
        previous=SEARCH.previous_history,
    output:
        history=RUN.observations("{branch}", "{round}"),
    log:
        RUN.log("rounds/{branch}/{round}/tell"),
    params:
        run_dir=RUN.dir,
    localrule: job_is_local("tell")
    script:
        "../../scripts/tell.py"
