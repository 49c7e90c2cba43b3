"""Rule `policies`: config.json -> results/<run>/policies.json."""

from spica_lib.artifacts import read_model, write_model
from spica_lib.logs import stage_log
from spica_lib.policies import apply_policy_filters
from spica_lib.validate import ValidatedConfig

with stage_log(snakemake.log[0]) as log:  # noqa: F821 (snakemake is injected by the script directive)
    validated = read_model(snakemake.input.config, ValidatedConfig)  # noqa: F821
    result = apply_policy_filters(validated.config)
    write_model(snakemake.output.policies, result)  # noqa: F821
    log.info("kept %d policies, dropped %d", len(result.kept), len(result.dropped))
    for dropped in result.dropped:
        log.info("dropped %s: %s", dropped.label, dropped.reason)
