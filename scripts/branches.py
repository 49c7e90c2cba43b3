"""Rule `branches`: config.json + policies.json -> branches/<mode>/{pool.parquet, branch.json}."""

from spica_lib.base.artifacts import read_model, write_model
from spica_lib.base.logs import stage_log
from spica_lib.config.policies import PolicyFilter
from spica_lib.config.validate import ValidatedConfig
from spica_lib.pools.branches import enumerate_branches
from spica_lib.pools.table import write_pool

smk = snakemake  # noqa: F821 (injected by Snakemake's script directive)

with stage_log(smk.log[0]) as log:
    validated = read_model(smk.input.config, ValidatedConfig)
    policies = read_model(smk.input.policies, PolicyFilter)
    branches = {b.spec.deployment_mode: b for b in enumerate_branches(validated.config, policies.kept)}
    for mode, pool_path, spec_path in zip(smk.params.modes, smk.output.pools, smk.output.specs, strict=True):
        branch = branches[mode]
        write_pool(pool_path, branch.pool, mode, branch.spec.backends)
        write_model(spec_path, branch.spec)
        log.info(
            "%s: %s, %d layouts %s", mode, branch.spec.status, branch.spec.pool_size, branch.spec.pool_size_by_backend
        )
        for skipped in branch.spec.skipped_backends:
            log.info("%s: backend %s skipped: %s", mode, skipped.backend, skipped.reason)
