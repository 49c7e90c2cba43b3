# The search: per branch and round, a checkpoint asks Vizier for candidates (suggest), one job per
# new trial replays it (trial), and a tell rule appends the round to the branch history, which the
# next round's suggest reads. The checkpoint writes the round's new specs to rounds/<branch>/<k>/specs/;
# trial jobs only ever write their own rounds/<branch>/<k>/trials/<key>.json.
import json
import math
import os

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
        specs=directory(RUN.round_specs("{branch}", "{round}")),
    log:
        RUN.log("rounds/{branch}/{round}/suggest"),
    params:
        run_dir=RUN.dir,
    localrule: True
    script:
        "../scripts/suggest.py"


# A trial job that dies without writing its file was killed from outside (SLURM time limit, node
# failure, scancel, OOM): our own timeout and replay errors are always written as results. Snakemake
# retries it; the last allowed attempt records the kill instead of replaying, so the round can close.
def last_trial_attempt(wildcards):
    # Cluster jobs run Snakemake with --retries 0, so the main process, which evaluates this before it
    # submits, hands its count down through the environment (sbatch exports it to the job).
    os.environ.setdefault("SPICA_TRIAL_RETRIES", str(workflow.execution_settings.retries))
    return int(os.environ["SPICA_TRIAL_RETRIES"]) + 1


rule trial:
    message:
        "Replaying trial {wildcards.key} (round {wildcards.round} of {wildcards.branch})"
    input:
        specs=RUN.round_specs("{branch}", "{round}"),
    output:
        trial=RUN.trial("{branch}", "{round}", "{key}"),
    log:
        RUN.log("rounds/{branch}/{round}/trials/{key}"),
    # One group per (branch, round): `--group-components trials_{branch}_r{round}=N` packs N
    # trials into one cluster job. Rounds must not share a group (a later round depends on an earlier one).
    group:
        "trials_{branch}_r{round}"
    params:
        spec=RUN.spec("{branch}", "{round}", "{key}"),
        max_eval_seconds=RUN.max_eval_seconds,
        last_attempt=last_trial_attempt,
        journal=RUN.journal("{key}"),
    threads: 1
    resources:
        mem_mb=4000,
        runtime=math.ceil((RUN.max_eval_seconds or 3600) / 60) + 5,
        trial_slots=1,
        trial_attempt=lambda wildcards, attempt: attempt,  # 1, then +1 per retry (params cannot see it)
    script:
        "../scripts/trial.py"


def round_trials(wildcards):
    path = checkpoints.suggest.get(branch=wildcards.branch, round=wildcards.round).output.suggestions
    with open(path, encoding="utf-8") as handle:
        keys = json.load(handle)["new_keys"]
    return [RUN.trial(wildcards.branch, wildcards.round, key) for key in keys]


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
    params:
        run_dir=RUN.dir,
    localrule: True
    script:
        "../scripts/tell.py"
