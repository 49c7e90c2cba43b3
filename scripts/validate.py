"""Rule `validate`: config YAML -> results/<run>/config.json."""

from spica_lib.base.artifacts import write_model
from spica_lib.base.logs import stage_log
from spica_lib.config.trace import keep_scan
from spica_lib.config.validate import build_validated_config

smk = snakemake  # noqa: F821 (injected by Snakemake's script directive)

with stage_log(smk.log[0]) as log:
    validated = build_validated_config(smk.input.config, smk.params.run)
    for trace in validated.trace_paths():  # read and hashed once per run: the jobs read these scans
        log.info("trace %s: scan kept at %s", trace, keep_scan(trace) or "(nowhere: not a sweep)")
    write_model(smk.output.config, validated)
    log.info("run %s: config sha256 %s", validated.run, validated.config_sha256)
    log.info("perf DB versions: %s", validated.catalog.perf_db_versions)
