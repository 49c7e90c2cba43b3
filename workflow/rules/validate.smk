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
    script:
        "../../scripts/validate.py"
