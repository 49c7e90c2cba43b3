"""The body of rule `report`: the run's files -> report/report.md, report/*.png, manifest.json, deploy/<rank>/."""

from __future__ import annotations

from pathlib import Path

from spica_lib.base.artifacts import write_model
from spica_lib.base.logs import stage_log
from spica_lib.report.build import write_report
from spica_lib.report.deploy import write_top_deployments
from spica_lib.report.manifest import build_manifest
from spica_lib.report.view import RunView
from spica_lib.run.job import JobArgs


def report(job: JobArgs) -> None:
    with stage_log(job.log[0]) as log:
        view = RunView(job.params["run_dir"])  # the run's trials read once, for the report and the deployments
        written = write_report(view, str(Path(job.output["report"]).parent))
        log.info("report: %s", ", ".join(str(path) for path in written))
        for deployment in write_top_deployments(view, job.output["deploy"]):
            error = f"; {deployment.error}" if deployment.error else ""
            differences = len(deployment.differences)
            log.info("deploy/%d: %s; %d difference(s)%s", deployment.rank, deployment.deployment, differences, error)
        write_model(job.output["manifest"], build_manifest(view.validated, job.input["config"]))
