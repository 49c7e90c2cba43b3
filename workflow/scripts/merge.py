"""Rule `merge`: branch histories + trial files -> candidates.parquet, ranked.csv | pareto.csv, summary.json."""

from pathlib import Path

from spica_lib.base.artifacts import atomic_write_parquet, atomic_write_text, read_model, write_model
from spica_lib.base.logs import stage_log
from spica_lib.config.validate import ValidatedConfig
from spica_lib.results.merge import collect_candidates, frame, ordered, summarise
from spica_lib.search.history import BranchHistory, RoundSuggestions
from spica_lib.trial.store import load_records

smk = snakemake  # noqa: F821 (injected by Snakemake's script directive)

with stage_log(smk.log[0]) as log:
    config = read_model(smk.input.config, ValidatedConfig).config
    histories = [read_model(path, BranchHistory) for path in smk.input.histories]
    keys = [o.key for h in histories for o in h.observations if o.key]
    records = load_records(smk.params.run_dir, keys)
    rows = collect_candidates(histories, records)
    best = ordered(config, rows)
    atomic_write_parquet(smk.output.candidates, frame(rows))
    atomic_write_text(smk.output.table, frame(best, with_rank=True).to_csv(index=False))
    rounds = sorted(Path(smk.params.run_dir).glob("rounds/*/*/suggestions.json"))
    optimizer = sum(read_model(path, RoundSuggestions).optimizer_seconds for path in rounds)
    summary = summarise(config, histories, records, best, optimizer)
    write_model(smk.output.summary, summary)
    log.info("%s", summary.line)
    print(summary.line)
