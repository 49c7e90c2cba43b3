rule policies:
    message:
        "Filtering planner scaling policies for the goal of run {params.run}"
    input:
        config=rules.validate.output.config,
    output:
        policies=RUN.policies_json,
    log:
        RUN.log("policies"),
    params:
        run=RUN.run,
    localrule: True
    run:  # in Snakemake's own process, which already holds what the stage computes (spica_lib/run/jobs/setup.py)
        run_in_snakemake(rule, input=input, output=output, params=params, wildcards=wildcards, log=log,
                         threads=threads, resources=resources)
