rule validate:
    message:
        "Validating {input.config} as run {params.run}"
    input:
        config=RUN.config_file,
        trace=[RUN.trace_file] if RUN.trace_file else [],
    output:
        config=RUN.config_json,
    log:
        RUN.log("validate"),
    params:
        run=RUN.run,
    localrule: True
    run:  # in Snakemake's own process, which already holds what the stage computes (spica_lib/run/jobs/setup.py)
        run_in_snakemake(rule, input=input, output=output, params=params, wildcards=wildcards, log=log,
                         threads=threads, resources=resources)
