"""The body of rule `report`: the run's files -> report/report.md, report/*.png and manifest.json."""

from __future__ import annotations

from pathlib import Path

from spica_lib.base.artifacts import write_model
from spica_lib.base.logs import stage_log
from spica_lib.report.build import write_report
from spica_lib.report.manifest import build_manifest
from spica_lib.run.job_args import JobArgs
from spica_lib.run.view import RunView


def report(job: JobArgs) -> None:
    with stage_log(job.log[0]) as log:
        view = RunView(job.params["run_dir"])
        written = write_report(view, str(Path(job.output["report"]).parent))
        log.info("report: %s", ", ".join(str(path) for path in written))
        write_model(job.output["manifest"], build_manifest(view.validated, job.input["config"]))
