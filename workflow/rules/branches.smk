rule branches:
    message:
        "Building candidate pools for {params.modes} from the aiconfigurator perf DB"
    input:
        config=rules.validate.output.config,
        policies=rules.policies.output.policies,
    output:
        pools=[RUN.pool_parquet(mode) for mode in RUN.modes],
        specs=[RUN.branch_json(mode) for mode in RUN.modes],
    log:
        RUN.log("branches"),
    params:
        modes=RUN.modes,
    localrule: True
    run:  # in Snakemake's own process, which already holds what the stage computes (spica_lib/run/jobs/setup.py)
        run_in_snakemake(rule, input=input, output=output, params=params, wildcards=wildcards, log=log,
                         threads=threads, resources=resources)
