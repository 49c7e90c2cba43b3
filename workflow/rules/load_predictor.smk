# One job per (throughput interval, predictor candidate), so slow ARIMA / Prophet candidates run in
# parallel and a resumed run rescores only what is missing; a small rule merges them.


wildcard_constraints:
    interval=r"\d+",
    label=r"[A-Za-z0-9_]+",


rule load_predictor_score:
    message:
        "Scoring load predictor {wildcards.label} at a {wildcards.interval} s interval"
    input:
        config=rules.validate.output.config,
        policies=rules.policies.output.policies,
    output:
        score=RUN.predictor_score("{interval}", "{label}"),
    log:
        RUN.log("load_predictor/{interval}/{label}"),
    params:
        run_dir=RUN.dir,
    threads: job_threads("load_predictor_score")
    resources:
        mem_mb=job_mem_mb("load_predictor_score"),
        runtime=30,
    localrule: job_is_local("load_predictor_score")  # in its script's own process (spica_lib/host/registry.py)
    script:
        "../../scripts/load_predictor_score.py"


rule load_predictor:
    message:
        "Choosing a load predictor per scaling interval for run {params.run}"
    input:
        config=rules.validate.output.config,
        policies=rules.policies.output.policies,
        scores=[RUN.predictor_score(interval, label) for interval, label in RUN.predictor_jobs],
    output:
        table=RUN.load_predictor_parquet,
        result=RUN.load_predictor_json,
    log:
        RUN.log("load_predictor"),
    params:
        run=RUN.run,
    localrule: True
    run:  # in Snakemake's own process, which already holds what the stage computes (spica_lib/run/jobs/setup.py)
        run_in_snakemake(rule, input=input, output=output, params=params, wildcards=wildcards, log=log,
                         threads=threads, resources=resources)
