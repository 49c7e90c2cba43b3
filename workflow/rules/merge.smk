rule merge:
    message:
        "Ranking the candidates of run {params.run}"
    input:
        config=rules.validate.output.config,
        histories=[RUN.observations(mode, RUN.last_round) for mode in RUN.modes],
        finish=RUN.finish_json,
        baselines=[RUN.baselines_json] if RUN.baselines else [],
        stress=[RUN.stress_json] if RUN.stress_trials else [],
        capacity=[RUN.capacity_json] if RUN.capacity_trials else [],
    output:
        candidates=RUN.candidates_parquet,
        table=RUN.ranking_csv,
        summary=RUN.summary_json,
    log:
        RUN.log("merge"),
    params:
        run=RUN.run,
        run_dir=RUN.dir,
    localrule: job_is_local("merge")
    script:
        "../../scripts/merge.py"
