# The search: per branch and round, a checkpoint asks Vizier for candidates (suggest), one job per
# new trial replays it (trial), and a tell rule appends the round to the branch history, which the
# next round's suggest reads. Trial jobs only ever write their own trials/<key>.json.
import json
import math

# Trial jobs may run `parallel_evals` at once (Snakemake's --resources can lower it further).
workflow.global_resources.setdefault("trial_slots", RUN.parallel_evals)


wildcard_constraints:
    branch=r"agg|disagg",
    round=r"\d+",
    key=r"[0-9a-f]{64}",


def previous_history(wildcards):
    r = int(wildcards.round)
    return [] if r == 0 else [RUN.observations(wildcards.branch, r - 1)]


checkpoint suggest:
    message:
        "Asking Vizier for round {wildcards.round} of branch {wildcards.branch}"
    input:
        config=rules.validate.output.config,
        predictor=rules.load_predictor.output.result,
        branch=RUN.branch_json("{branch}"),
        pool=RUN.pool_parquet("{branch}"),
        previous=previous_history,
    output:
        suggestions=RUN.suggestions("{branch}", "{round}"),
    log:
        RUN.log("rounds/{branch}/{round}/suggest"),
    localrule: True
    script:
        "../../scripts/suggest.py"


rule trial:
    message:
        "Replaying trial {wildcards.key}"
    input:
        spec=RUN.spec("{key}"),
    output:
        trial=RUN.trial("{key}"),
    log:
        RUN.log("trials/{key}"),
    params:
        max_eval_seconds=RUN.max_eval_seconds,
    threads: 1
    resources:
        mem_mb=4000,
        runtime=math.ceil((RUN.max_eval_seconds or 3600) / 60) + 5,
        trial_slots=1,
    script:
        "../../scripts/trial.py"


def round_trials(wildcards):
    path = checkpoints.suggest.get(branch=wildcards.branch, round=wildcards.round).output.suggestions
    with open(path, encoding="utf-8") as handle:
        keys = json.load(handle)["new_keys"]
    return [RUN.trial(key) for key in keys]


rule tell:
    message:
        "Collecting round {wildcards.round} of branch {wildcards.branch}"
    input:
        config=rules.validate.output.config,
        suggestions=RUN.suggestions("{branch}", "{round}"),
        trials=round_trials,
        previous=previous_history,
    output:
        history=RUN.observations("{branch}", "{round}"),
    log:
        RUN.log("rounds/{branch}/{round}/tell"),
    localrule: True
    script:
        "../../scripts/tell.py"
