# What the user hands a cluster, next to the report: deployment files for the top `sweep.top_k` candidates,
# each checked as the cluster would check it (spica_lib/deploy). Read from the run's ranked files.


rule deploy:
    message:
        "Writing the deployment files of run {params.run}"
    input:
        config=rules.validate.output.config,
        summary=RUN.summary_json,
        table=RUN.ranking_csv,
    output:
        deploy=directory(RUN.deploy_dir),
    log:
        RUN.log("deploy"),
    params:
        run=RUN.run,
        run_dir=RUN.dir,
    localrule: job_is_local("deploy")
    script:
        "../../scripts/deploy.py"
