"""Rule `merge`: branch histories + trial files -> candidates.parquet, ranked.csv | pareto.csv, summary.json."""

from spica_lib.base.artifacts import atomic_write_parquet, atomic_write_text, read_model, write_model
from spica_lib.base.logs import stage_log
from spica_lib.config.validate import ValidatedConfig
from spica_lib.results.merge import collect_candidates, frame, ordered, summarise
from spica_lib.run.layout import RunFiles
from spica_lib.search.history import BranchHistory
from spica_lib.trial.store import read_trials

smk = snakemake  # noqa: F821 (injected by Snakemake's script directive)
files = RunFiles(dir=smk.params.run_dir)

with stage_log(smk.log[0]) as log:
    config = read_model(smk.input.config, ValidatedConfig).config
    histories = [read_model(path, BranchHistory) for path in smk.input.histories]
    records = {}
    for history in histories:
        records.update(read_trials(files.trial_files(history.deployment_mode, history.observations)))
    rows = collect_candidates(histories, records)
    best = ordered(config, rows)
    atomic_write_parquet(smk.output.candidates, frame(rows))
    atomic_write_text(smk.output.table, frame(best, with_rank=True).to_csv(index=False))
    summary = summarise(config, histories, records, best)
    write_model(smk.output.summary, summary)
    log.info("%s", summary.line)
    print(summary.line)
