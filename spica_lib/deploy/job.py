"""The body of rule `deploy`: the run's ranked files -> deploy/<rank>/ for the top `sweep.top_k` deployments."""

from __future__ import annotations

from spica_lib.base.logs import stage_log
from spica_lib.deploy.top import write_top_deployments
from spica_lib.run.job_args import JobArgs
from spica_lib.run.view import RunView


def deploy(job: JobArgs) -> None:
    with stage_log(job.log[0]) as log:
        for deployment in write_top_deployments(RunView(job.params["run_dir"]), job.output["deploy"]):
            error = f"; {deployment.error}" if deployment.error else ""
            differences = len(deployment.differences)
            log.info("deploy/%d: %s; %d difference(s)%s", deployment.rank, deployment.deployment, differences, error)
