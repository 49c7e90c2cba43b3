import math


# The noise-aware finish: the top `sweep.top_k` deployments whose replay is not exact (KV router) are
# replayed until each has `sweep.finish_repeats` replays; merge ranks them by their mean.
rule finish:
    message:
        "Replaying the top deployments of run {params.run} again"
    input:
        config=rules.validate.output.config,
        histories=[RUN.observations(mode, RUN.last_round) for mode in RUN.modes],
    output:
        finish=RUN.finish_json,
    log:
        RUN.log("finish"),
    params:
        run=RUN.run,
        run_dir=RUN.dir,
        max_eval_seconds=RUN.max_eval_seconds,
    threads: max(1, RUN.parallel_evals // len(RUN.modes))
    resources:
        mem_mb=lambda wildcards, threads: 4000 * threads,
        # Minutes: at most top_k x (finish_repeats - 1) replays in waves of `threads`, each up to its limit.
        runtime=lambda wildcards, threads: math.ceil(RUN.finish_replays / max(1, threads))
        * math.ceil((RUN.max_eval_seconds or 3600) / 60)
        + 5,
    script:
        "../scripts/finish.py"
