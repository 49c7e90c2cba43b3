"""Rule `load_predictor`: the scores -> load_predictor.parquet + load_predictor.json."""

from spica_lib.base.artifacts import read_model, write_model
from spica_lib.base.logs import stage_log
from spica_lib.config.policies import PolicyFilter
from spica_lib.config.validate import ValidatedConfig
from spica_lib.predictor.plan import PresetScore, merge_scores, plan_predictor_jobs
from spica_lib.predictor.table import write_predictor_table

smk = snakemake  # noqa: F821 (injected by Snakemake's script directive)

with stage_log(smk.log[0]) as log:
    config = read_model(smk.input.config, ValidatedConfig).config
    plan = plan_predictor_jobs(config, read_model(smk.input.policies, PolicyFilter).kept)
    scores = [read_model(path, PresetScore) for path in smk.input.scores]
    result, rows = merge_scores(plan, scores)
    write_predictor_table(smk.output.table, rows)
    write_model(smk.output.result, result)
    log.info("reason: %s; winners: %s", result.reason, result.best_by_interval)
