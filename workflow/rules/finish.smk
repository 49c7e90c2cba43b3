from spica_lib.run.time_limits import replay_job_minutes


# A branch's share of the finish (results/finish_share.py): once the branch's last round is told, its top
# deployments' first-look samples replay into the journal on its share of the cores, while another branch
# still searches; the finish then restores them. It stops once every other branch has told its last round.
rule finish_share:
    message:
        "Replaying the top of branch {wildcards.branch} on fresh traffic samples while another branch searches"
    input:
        config=rules.validate.output.config,
        histories=lambda wildcards: [RUN.observations(wildcards.branch, RUN.last_round)],
        predictor=rules.load_predictor.output.result,
    output:
        share=RUN.finish_share_json("{branch}"),
    log:
        RUN.log("finish_shares/{branch}"),
    params:
        run_dir=RUN.dir,
        max_eval_seconds=RUN.max_eval_seconds,
        others=lambda wildcards: [RUN.observations(m, RUN.last_round) for m in RUN.modes if m != wildcards.branch],
        # aiconfigurator's pick (baselines on): replayed first if it is known by then. Not an input: its own
        # search may still run (a first run), and the finish must not wait for it; only the baselines do.
        pick=RUN.aiconfigurator_pick_json if RUN.baselines else None,
    threads: job_threads("finish_share")
    resources:
        mem_mb=job_mem_mb("finish_share"),
        runtime=lambda wildcards, threads: replay_job_minutes(
            RUN.finish_trials, RUN.workloads, threads, RUN.max_eval_seconds
        ),
    localrule: job_is_local("finish_share")  # with pilots, a rule script here hands the job to one
    script:
        "../../scripts/finish_share.py"


# After every branch's last round, when no round job holds a core, three stages replay the finished top,
# each with the sweep's whole `parallel_evals` (a share per branch left cores idle) and one rule shape:
# - finish: the top `sweep.finish_top` deployments on `sweep.finish_samples` fresh traffic samples each
#   (results/finish.py); merge ranks them by those samples (results/confidence.py);
# - stress: the finished top under perturbed prefill and decode step times (results/stress.py);
# - capacity: the finished top's highest load within the SLA, by bisection with replays (results/capacity.py).
# name -> (message, the inputs besides config and histories, output, the most trial replays it runs)
AFTER_SEARCH = {
    "finish": (
        "Replaying the top deployments of run {params.run} on fresh traffic samples",
        {"shares": [RUN.finish_share_json(mode) for mode in RUN.modes] if RUN.finish_shares else []},
        RUN.finish_json,
        RUN.finish_trials,
    ),
    "stress": (
        "Replaying the top deployments of run {params.run} with perturbed step times",
        {"finish": RUN.finish_json},
        RUN.stress_json,
        RUN.stress_trials,
    ),
    "capacity": (
        "Bisecting the load the top deployments of run {params.run} take within the SLA",
        {"finish": RUN.finish_json},
        RUN.capacity_json,
        RUN.capacity_trials,
    ),
}


def replay_minutes(trials):
    """A job's time limit: `trials` replays, each on every workload, in waves of its threads."""
    return lambda wildcards, threads: replay_job_minutes(trials, RUN.workloads, threads, RUN.max_eval_seconds)


for stage, (text, inputs, result, trials) in AFTER_SEARCH.items():

    rule:
        name:
            stage
        message:
            text
        input:
            config=rules.validate.output.config,
            histories=[RUN.observations(mode, RUN.last_round) for mode in RUN.modes],
            **inputs,
        output:
            **{stage: result},
        log:
            RUN.log(stage),
        params:
            run=RUN.run,
            run_dir=RUN.dir,
            max_eval_seconds=RUN.max_eval_seconds,
        threads: job_threads(stage)
        resources:
            mem_mb=job_mem_mb(stage),
            runtime=replay_minutes(trials),
        localrule: job_is_local(stage)  # with pilots, a rule script here hands the job to one
        script:
            f"../../scripts/{stage}.py"
