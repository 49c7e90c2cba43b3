"""Checkpoint `suggest`: branch + history -> rounds/<branch>/<k>/suggestions.json and specs/<key>.json."""

from spica_lib.base.artifacts import read_model, write_model
from spica_lib.base.logs import stage_log
from spica_lib.config.validate import ValidatedConfig
from spica_lib.facts.kv_capacity import KvEstimator
from spica_lib.pools.branches import BranchSpec
from spica_lib.pools.table import read_pool
from spica_lib.predictor.plan import LoadPredictorResult
from spica_lib.search.history import BranchHistory
from spica_lib.search.rounds import SearchContext, suggest_round
from spica_lib.trial.store import load_records, write_spec_once

smk = snakemake  # noqa: F821 (injected by Snakemake's script directive)
RUN_DIR = smk.output.suggestions.split("/rounds/")[0]

with stage_log(smk.log[0]) as log:
    config = read_model(smk.input.config, ValidatedConfig).config
    spec = read_model(smk.input.branch, BranchSpec)
    pool = read_pool(smk.input.pool, spec.deployment_mode) if spec.status == "ready" else []
    history = read_model(smk.input.previous[0], BranchHistory) if smk.input.previous else None
    known = load_records(RUN_DIR, [o.key for o in (history.observations if history else []) if o.key])
    ss = config.search_space
    context = SearchContext(
        config=config,
        predictor_winners=read_model(smk.input.predictor, LoadPredictorResult).winners(),
        estimator=KvEstimator(ss.model_name, ss.hardware_sku, spec.backend_versions),
    )
    suggestions, specs = suggest_round(
        context, spec, pool, int(smk.wildcards.round), history, {k: r.result for k, r in known.items()}
    )
    for trial in specs:
        write_spec_once(f"{RUN_DIR}/specs/{trial.key()}.json", trial)
    write_model(smk.output.suggestions, suggestions)
    outcomes = {}
    for item in suggestions.suggested:
        outcomes[item.outcome] = outcomes.get(item.outcome, 0) + 1
    log.info(
        "%s round %s: %d suggestion(s) -> %s", spec.deployment_mode, smk.wildcards.round, suggestions.attempts, outcomes
    )
    if suggestions.skipped:
        log.info("no work: %s", suggestions.skipped)
