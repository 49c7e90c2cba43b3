"""Rule `merge`: branch histories, trial files and the finish -> candidates.parquet, ranked.csv | pareto.csv,
summary.json.
"""

from __future__ import annotations

from spica_lib.base.artifacts import atomic_write_parquet, atomic_write_text, read_model, write_model
from spica_lib.base.logs import FILE_ONLY, stage_log
from spica_lib.baselines.model import BaselinesResult
from spica_lib.results.capacity import CapacityResult
from spica_lib.results.finish import FinishResult
from spica_lib.results.merge import apply_finish, frame
from spica_lib.results.stress import StressResult
from spica_lib.results.summary import summarise
from spica_lib.run.job_args import JobArgs
from spica_lib.run.jobs.ranked import ranked_run


def merge(job: JobArgs) -> None:
    """Rule `merge`: branch histories + trial files -> candidates.parquet, ranked.csv | pareto.csv, summary.json."""
    with stage_log(job.log[0]) as log:
        run = ranked_run(job)
        finished = read_model(job.input["finish"], FinishResult)
        best = apply_finish(run.best, finished)
        atomic_write_parquet(job.output["candidates"], frame(run.rows))
        atomic_write_text(job.output["table"], frame(best, with_rank=True).to_csv(index=False))
        baselines, stress, capacity = job.inputs("baselines"), job.inputs("stress"), job.inputs("capacity")
        summary = summarise(
            run.config,
            run.histories,
            run.records,
            best,
            read_model(baselines[0], BaselinesResult) if baselines else None,
            finished,
            read_model(stress[0], StressResult) if stress else None,
            read_model(capacity[0], CapacityResult) if capacity else None,
        )
        write_model(job.output["summary"], summary)
        log.info("%s", summary.line, extra={FILE_ONLY: True})
        print(summary.line)  # once, on stdout (the log file keeps its copy)
