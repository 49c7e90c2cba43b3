"""Rule `report`: the run's files -> report/report.md, report/*.png, manifest.json, deploy/<rank>/."""

from spica_lib.base.artifacts import write_model
from spica_lib.base.logs import stage_log
from spica_lib.report.build import write_report
from spica_lib.report.deploy import write_top_deployments
from spica_lib.report.manifest import build_manifest
from spica_lib.report.view import RunView

smk = snakemake  # noqa: F821 (injected by Snakemake's script directive)

with stage_log(smk.log[0]) as log:
    view = RunView(smk.params.run_dir)  # read the run's trials once, for the report and the deployments
    written = write_report(view, smk.output.report.rsplit("/", 1)[0])
    log.info("report: %s", ", ".join(str(path) for path in written))
    for deployment in write_top_deployments(view, smk.output.deploy):
        log.info("deploy/%d: %s; %d difference(s)%s", deployment.rank, deployment.deployment,
                 len(deployment.differences), f"; {deployment.error}" if deployment.error else "")  # fmt: skip
    write_model(smk.output.manifest, build_manifest(view.validated, smk.input.config))
