"""Checkpoint `suggest`: branch + history -> rounds/<branch>/<k>/suggestions.json and the round's specs/<key>.json."""

from pathlib import Path

from spica_lib.base.artifacts import read_model, write_model
from spica_lib.base.logs import stage_log
from spica_lib.config.validate import ValidatedConfig
from spica_lib.facts.kv_capacity import KvEstimator
from spica_lib.pools.branches import BranchSpec
from spica_lib.pools.table import read_pool
from spica_lib.predictor.plan import LoadPredictorResult
from spica_lib.run.layout import RunFiles
from spica_lib.search.history import BranchHistory
from spica_lib.search.rounds import SearchContext, suggest_round
from spica_lib.trial.store import read_trials

smk = snakemake  # noqa: F821 (injected by Snakemake's script directive)
files = RunFiles(dir=smk.params.run_dir)
branch, round_index = smk.wildcards.branch, int(smk.wildcards.round)

with stage_log(smk.log[0]) as log:
    config = read_model(smk.input.config, ValidatedConfig).config
    spec = read_model(smk.input.branch, BranchSpec)
    pool = read_pool(smk.input.pool, spec.deployment_mode) if spec.status == "ready" else []
    history = read_model(smk.input.previous[0], BranchHistory) if smk.input.previous else None
    past = history.observations if history else []
    known = read_trials(files.trial_files(branch, past))
    space = config.search_space
    context = SearchContext(
        config=config,
        predictor_winners=read_model(smk.input.predictor, LoadPredictorResult).winners(),
        estimator=KvEstimator(space.model_name, space.hardware_sku, spec.backend_versions),
    )
    known_results = {k: r.result for k, r in known.items()}
    suggestions, specs = suggest_round(
        context, spec, pool, round_index, history, known_results, trials_per_job=smk.params.trials_per_job
    )
    Path(smk.output.specs).mkdir(parents=True, exist_ok=True)  # the folder is declared even when the round is empty
    for trial in specs:
        write_model(files.spec(branch, round_index, trial.key()), trial)
    write_model(smk.output.suggestions, suggestions)
    outcomes = {}
    for item in suggestions.suggested:
        outcomes[item.outcome] = outcomes.get(item.outcome, 0) + 1
    log.info("%s round %d: %d suggestion(s) -> %s", branch, round_index, suggestions.attempts, outcomes)
    if suggestions.skipped:
        log.info("no work: %s", suggestions.skipped)
