from spica_lib.run.time_limits import replay_job_minutes


# aiconfigurator's own pick needs only the config: it runs next to the search, from round 0 on. Its search
# (seconds of CPU when its answer is not cached) holds none of Snakemake's cores (threads: 0): counted as one,
# it left a single core to the two branches' round-0 jobs until it ended. Only the baselines, after the
# finish, wait for it. (At a lower CPU priority it starved on a machine others kept busy: left as it is.)
rule aiconfigurator_pick:
    message:
        "Asking aiconfigurator's own search for its pick for run {params.run}"
    input:
        config=rules.validate.output.config,
    output:
        pick=RUN.aiconfigurator_pick_json,
    log:
        RUN.log("aiconfigurator_pick"),
    params:
        run=RUN.run,
        run_dir=RUN.dir,
    threads: job_threads("aiconfigurator_pick")
    resources:
        mem_mb=job_mem_mb("aiconfigurator_pick"),
        runtime=15,
        cpus_per_task=1,  # as a SLURM job of its own, one CPU (SLURM refuses none)
    localrule: job_is_local("aiconfigurator_pick")
    script:
        "../../scripts/aiconfigurator_pick.py"


# The baselines, replayed with the search's workload and SLA once the ranking is final (after the finish).
rule baselines:
    message:
        "Replaying the baselines of run {params.run}"
    input:
        config=rules.validate.output.config,
        predictor=rules.load_predictor.output.result,
        histories=[RUN.observations(mode, RUN.last_round) for mode in RUN.modes],
        finish=RUN.finish_json,
        pick=RUN.aiconfigurator_pick_json,
    output:
        baselines=RUN.baselines_json,
    log:
        RUN.log("baselines"),
    params:
        run=RUN.run,
        run_dir=RUN.dir,
        max_eval_seconds=RUN.max_eval_seconds,
    # As the finish: the sweep's parallel replays, at most 3 (there are at most three baselines).
    threads: job_threads("baselines")
    resources:
        mem_mb=job_mem_mb("baselines"),
        # Minutes: at most three baselines to replay, each on every workload.
        runtime=lambda wildcards, threads: replay_job_minutes(3, RUN.workloads, threads, RUN.max_eval_seconds),
    localrule: job_is_local("baselines")  # with pilots, a rule script here hands the job to one
    script:
        "../../scripts/baselines.py"
