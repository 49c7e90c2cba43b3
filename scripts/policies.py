"""Rule `policies`: config.json -> results/<run>/policies.json."""

from spica_lib.base.artifacts import read_model, write_model
from spica_lib.base.logs import stage_log
from spica_lib.config.policies import apply_policy_filters
from spica_lib.config.validate import ValidatedConfig

smk = snakemake  # noqa: F821 (injected by Snakemake's script directive)

with stage_log(smk.log[0]) as log:
    validated = read_model(smk.input.config, ValidatedConfig)
    result = apply_policy_filters(validated.config)
    write_model(smk.output.policies, result)
    log.info("kept %d policies, dropped %d", len(result.kept), len(result.dropped))
    for dropped in result.dropped:
        log.info("dropped %s: %s", dropped.label, dropped.reason)
