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
    script:
        "../../scripts/policies.py"
