"""Rule `validate`: config YAML -> results/<run>/config.json."""

from spica_lib.artifacts import write_model
from spica_lib.logs import stage_log
from spica_lib.validate import build_validated_config

with stage_log(snakemake.log[0]) as log:  # noqa: F821 (snakemake is injected by the script directive)
    validated = build_validated_config(snakemake.input.config, snakemake.params.run)  # noqa: F821
    write_model(snakemake.output.config, validated)  # noqa: F821
    log.info("run %s: config sha256 %s", validated.run, validated.config_sha256)
    log.info("perf DB versions: %s", validated.catalog.perf_db_versions)
