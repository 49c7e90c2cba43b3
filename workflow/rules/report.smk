# What the user takes away: report.md with its plots (also in `snakemake --report`), the manifest,
# and deployment files for the top `sweep.top_k` candidates. All read the run's files only.
from spica_lib.report.build import plot_names


rule report:
    message:
        "Writing the report of run {params.run}"
    input:
        config=rules.validate.output.config,
        summary=RUN.summary_json,
        table=RUN.ranking_csv,
    output:
        report=report(RUN.report_file("report.md"), category="Report"),
        plots=[
            report(RUN.report_file(name), category="Plots") for name in plot_names(RUN.is_pareto)
        ],
        manifest=RUN.manifest_json,
    log:
        RUN.log("report"),
    params:
        run=RUN.run,
        run_dir=RUN.dir,
    localrule: True
    script:
        "../scripts/report.py"


rule deploy:
    message:
        "Writing deployment files for the top candidates of run {params.run}"
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
    localrule: True
    script:
        "../scripts/deploy.py"
