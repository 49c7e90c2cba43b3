"""Rule `report`: the run's files -> report/report.md, report/*.png, manifest.json, deploy/<rank>/."""

from spica_lib.base.artifacts import read_model, write_model
from spica_lib.base.logs import stage_log
from spica_lib.config.validate import ValidatedConfig
from spica_lib.report.build import write_report
from spica_lib.report.deploy import write_top_deployments
from spica_lib.report.manifest import build_manifest

smk = snakemake  # noqa: F821 (injected by Snakemake's script directive)

with stage_log(smk.log[0]) as log:
    written = write_report(smk.params.run_dir, smk.output.report.rsplit("/", 1)[0])
    log.info("report: %s", ", ".join(str(path) for path in written))
    for deployment in write_top_deployments(smk.params.run_dir, smk.output.deploy):
        log.info("deploy/%d: %s; %d difference(s)%s", deployment.rank, deployment.deployment,
                 len(deployment.differences), f"; {deployment.error}" if deployment.error else "")  # fmt: skip
    validated = read_model(smk.input.config, ValidatedConfig)
    write_model(smk.output.manifest, build_manifest(validated, smk.input.config))
