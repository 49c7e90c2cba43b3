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
    threads: max(1, RUN.parallel_evals // len(RUN.modes))
    resources:
        mem_mb=lambda wildcards, threads: RUN.replay_mb * threads,
        runtime=lambda wildcards, threads: replay_job_minutes(
            RUN.finish_trials, RUN.workloads, threads, RUN.max_eval_seconds
        ),
    localrule: PILOT.on  # with pilots, a rule script here hands the job to one
    script:
        "../../scripts/finish_share.py"


# The finish: the top `sweep.finish_top` deployments replayed on `sweep.finish_samples` fresh traffic
# samples each (results/finish.py); merge ranks them by those samples (results/confidence.py).
# It, the stress test and the capacity bisection run after every branch's last round, when no round job
# holds a core: each takes the sweep's whole `parallel_evals` (a share per branch left cores idle).
rule finish:
    message:
        "Replaying the top deployments of run {params.run} on fresh traffic samples"
    input:
        config=rules.validate.output.config,
        histories=[RUN.observations(mode, RUN.last_round) for mode in RUN.modes],
        shares=[RUN.finish_share_json(mode) for mode in RUN.modes] if RUN.finish_shares else [],
    output:
        finish=RUN.finish_json,
    log:
        RUN.log("finish"),
    params:
        run=RUN.run,
        run_dir=RUN.dir,
        max_eval_seconds=RUN.max_eval_seconds,
    threads: max(1, RUN.parallel_evals)
    resources:
        mem_mb=lambda wildcards, threads: RUN.replay_mb * threads,
        # Minutes: at most finish_top x finish_samples trials, each on every workload.
        runtime=lambda wildcards, threads: replay_job_minutes(
            RUN.finish_trials, RUN.workloads, threads, RUN.max_eval_seconds
        ),
    localrule: PILOT.on  # with pilots, a rule script here hands the job to one
    script:
        "../../scripts/finish.py"


# The stress test: the finished top under perturbed prefill and decode step times (results/stress.py).
rule stress:
    message:
        "Replaying the top deployments of run {params.run} with perturbed step times"
    input:
        config=rules.validate.output.config,
        histories=[RUN.observations(mode, RUN.last_round) for mode in RUN.modes],
        finish=RUN.finish_json,
    output:
        stress=RUN.stress_json,
    log:
        RUN.log("stress"),
    params:
        run=RUN.run,
        run_dir=RUN.dir,
        max_eval_seconds=RUN.max_eval_seconds,
    threads: max(1, RUN.parallel_evals)
    resources:
        mem_mb=lambda wildcards, threads: RUN.replay_mb * threads,
        runtime=lambda wildcards, threads: replay_job_minutes(
            RUN.stress_trials, RUN.workloads, threads, RUN.max_eval_seconds
        ),
    localrule: PILOT.on  # with pilots, a rule script here hands the job to one
    script:
        "../../scripts/stress.py"


# Capacity: the finished top's highest load within the SLA, by bisection with replays (results/capacity.py).
rule capacity:
    message:
        "Bisecting the load the top deployments of run {params.run} take within the SLA"
    input:
        config=rules.validate.output.config,
        histories=[RUN.observations(mode, RUN.last_round) for mode in RUN.modes],
        finish=RUN.finish_json,
    output:
        capacity=RUN.capacity_json,
    log:
        RUN.log("capacity"),
    params:
        run=RUN.run,
        run_dir=RUN.dir,
        max_eval_seconds=RUN.max_eval_seconds,
    threads: max(1, RUN.parallel_evals)
    resources:
        mem_mb=lambda wildcards, threads: RUN.replay_mb * threads,
        runtime=lambda wildcards, threads: replay_job_minutes(
            RUN.capacity_trials, RUN.workloads, threads, RUN.max_eval_seconds
        ),
    localrule: PILOT.on  # with pilots, a rule script here hands the job to one
    script:
        "../../scripts/capacity.py"
