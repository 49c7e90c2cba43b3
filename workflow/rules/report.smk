# What the user reads, in one job after the merge: report.md with its plots (also in `snakemake --report`)
# and the manifest (versions and input hashes). Both are read from the run's files.
from spica_lib.report.build import plot_names


rule report:
    message:
        "Writing the report and manifest of run {params.run}"
    input:
        config=rules.validate.output.config,
        summary=RUN.summary_json,
        table=RUN.ranking_csv,
    output:
        report=report(RUN.report_file("report.md"), category="Report"),
        plots=[
            report(RUN.report_file(name), category="Plots")
            for name in plot_names(RUN.is_pareto, bool(RUN.capacity_trials))
        ],
        manifest=RUN.manifest_json,
    log:
        RUN.log("report"),
    params:
        run=RUN.run,
        run_dir=RUN.dir,
    localrule: job_is_local("report")
    script:
        "../../scripts/report.py"
