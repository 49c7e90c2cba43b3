"""Rule `tell`: suggestions + trial files -> rounds/<branch>/<k>/observations.json (the branch history)."""

from spica_lib.base.artifacts import read_model, write_model
from spica_lib.base.logs import stage_log
from spica_lib.config.validate import ValidatedConfig
from spica_lib.run.layout import RunFiles
from spica_lib.search.history import BranchHistory, RoundSuggestions
from spica_lib.search.rounds import tell_round
from spica_lib.trial.store import read_trials

smk = snakemake  # noqa: F821 (injected by Snakemake's script directive)
files = RunFiles(dir=smk.params.run_dir)

with stage_log(smk.log[0]) as log:
    config = read_model(smk.input.config, ValidatedConfig).config
    suggestions = read_model(smk.input.suggestions, RoundSuggestions)
    history = read_model(smk.input.previous[0], BranchHistory) if smk.input.previous else None
    records = read_trials(files.trial_files(smk.wildcards.branch, suggestions.suggested))
    updated = tell_round(config.goal, suggestions, {k: r.result for k, r in records.items()}, history)
    write_model(smk.output.history, updated)
    log.info("%s round %d: %s", updated.deployment_mode, suggestions.round, updated.tallies[-1].counts)
    if updated.stalled and (history is None or not history.stalled):
        log.info("branch %s stops: %s", updated.deployment_mode, updated.stall_reason)
