"""Rule `branches`: config.json + policies.json -> branches/<mode>/{pool.parquet, branch.json}."""

from spica_lib.artifacts import read_model, write_model
from spica_lib.branches import enumerate_branches
from spica_lib.logs import stage_log
from spica_lib.policies import PolicyFilter
from spica_lib.pool_table import write_pool
from spica_lib.validate import ValidatedConfig

with stage_log(snakemake.log[0]) as log:  # noqa: F821 (snakemake is injected by the script directive)
    validated = read_model(snakemake.input.config, ValidatedConfig)  # noqa: F821
    policies = read_model(snakemake.input.policies, PolicyFilter)  # noqa: F821
    branches = {b.spec.deployment_mode: b for b in enumerate_branches(validated.config, policies.kept)}
    for mode, pool_path, spec_path in zip(
        snakemake.params.modes,
        snakemake.output.pools,
        snakemake.output.specs,
        strict=True,  # noqa: F821
    ):
        branch = branches[mode]
        write_pool(pool_path, branch.pool, mode, branch.spec.backends)
        write_model(spec_path, branch.spec)
        log.info(
            "%s: %s, %d layouts %s", mode, branch.spec.status, branch.spec.pool_size, branch.spec.pool_size_by_backend
        )
        for skipped in branch.spec.skipped_backends:
            log.info("%s: backend %s skipped: %s", mode, skipped.backend, skipped.reason)
