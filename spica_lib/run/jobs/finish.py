"""Rule `finish`: the top deployments replayed on fresh traffic samples, sequentially -> finish.json."""

from __future__ import annotations

from spica_lib.base.artifacts import write_model
from spica_lib.base.logs import stage_log
from spica_lib.results.finish import sample_kind, sample_specs
from spica_lib.results.sequential import run_finish
from spica_lib.run.job_args import HOST, JobArgs
from spica_lib.run.jobs.ranked import finish_top, ranked_run
from spica_lib.run.layout import RunFiles
from spica_lib.trial.evaluate import warm_up_trials
from spica_lib.trial.spec import TrialResult, TrialSpec
from spica_lib.trial.store import run_replay_job


def warm_up_for_finish(job: JobArgs) -> None:
    """Load what the finish's replays need into the calling process (the warm host, before it forks)."""
    run = ranked_run(job)
    top = finish_top(run)  # empty with no finish (finish_samples unset): range(first) runs only for a finish
    first = run.config.sweep.finish_samples
    warm_up_trials(sample_specs(top, sample_kind(run.config), {key: range(first) for key in top}))


def finish(job: JobArgs) -> None:
    """Rule `finish`: the top deployments on fresh traffic samples, sequentially (results/sequential.py) -> finish.json.

    Every finish replay is journaled as "<key>#<i>" as it ends, so a killed finish resumes without
    replaying what it had.
    """
    files = RunFiles(dir=job.params["run_dir"])
    with stage_log(job.log[0]) as log:
        run = ranked_run(job)
        top = finish_top(run)
        log.info("%d distinct top deployment(s) on %s samples %s", len(top), sample_kind(run.config), HOST.where())

        def replay(specs: dict[str, TrialSpec]) -> dict[str, TrialResult]:
            records = run_replay_job(
                specs, files.journal, files.started, 1, 1,
                max_eval_seconds=job.params["max_eval_seconds"], parallel=job.threads,
            )  # fmt: skip
            out = {record.key: record.result for record, _ in records}
            log.info("look: %d replay(s) %s", len(specs), sorted({name.partition("#")[2] for name in specs}))
            return out

        result = run_finish(run.config, {key: (spec, run.records[key].result) for key, spec in top.items()}, replay)
        for deployment in result.deployments:
            log.info(
                "%s: search %.4g; fresh mean %.4g over %d feasible of %d sample(s)%s",
                deployment.key[:12],
                deployment.search_score,
                deployment.mean,
                len(deployment.scores),
                len(deployment.samples),
                f"; {'; '.join(deployment.failed_samples)}" if not deployment.held else "",
            )
        log.info("finish: %s", result.stopped)
        write_model(job.output["finish"], result)
