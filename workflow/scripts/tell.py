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
    tally = updated.tallies[-1]
    best = "none feasible yet" if tally.best_score is None else f"{tally.best_score:.4g}"
    # One progress line per round, on the console as well as in the log.
    progress = (
        f"spica {updated.deployment_mode} round {suggestions.round}: {tally.new_trials} new trial(s), best {best}"
    )
    print(progress, flush=True)
    log.info("%s; %s", progress, tally.counts)
    if updated.stalled and (history is None or not history.stalled):
        log.info("branch %s stops: %s", updated.deployment_mode, updated.stall_reason)
