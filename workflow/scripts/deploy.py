"""Rule `deploy`: the ranked deployments -> deploy/<rank>/ for the top sweep.top_k."""

from spica_lib.base.logs import stage_log
from spica_lib.report.deploy import write_top_deployments

smk = snakemake  # noqa: F821 (injected by Snakemake's script directive)

with stage_log(smk.log[0]) as log:
    for written in write_top_deployments(smk.params.run_dir, smk.output.deploy):
        log.info("deploy/%d: %s; %d difference(s)%s", written.rank, written.deployment, len(written.differences),
                 f"; {written.error}" if written.error else "")  # fmt: skip
