"""The capacity job's body: the finished top's highest load within the SLA (results/capacity.py) -> capacity.json."""

from __future__ import annotations

from spica_lib.base.artifacts import read_model, write_model
from spica_lib.base.logs import stage_log
from spica_lib.config import SmartSearchConfig
from spica_lib.results.capacity import LoadPoint, at_load, bisect_capacity
from spica_lib.results.finish import FinishResult
from spica_lib.results.merge import apply_finish
from spica_lib.run.job_args import HOST, JobArgs
from spica_lib.run.jobs.ranked import ranked_run
from spica_lib.trial.evaluate import evaluate_trials, warm_up_trials
from spica_lib.trial.spec import TrialRecord, TrialResult, TrialSpec


def _capacity_top(job: JobArgs) -> tuple[SmartSearchConfig, dict[str, TrialRecord]]:
    """The config and the top `sweep.capacity_top` trials in the finish's order (key -> record)."""
    run = ranked_run(job)
    ranked = apply_finish(run.best, read_model(job.input["finish"], FinishResult))
    return run.config, {row.key: run.records[row.key] for row in ranked[: run.config.sweep.capacity_top]}


def warm_up_for_capacity(job: JobArgs) -> None:
    """Load what the capacity replays need into the calling process (the warm host, before it forks)."""
    config, top = _capacity_top(job)
    warm_up_trials({key: at_load(config, record.spec, 2.0) for key, record in top.items()})


def capacity(job: JobArgs) -> None:
    """Rule `capacity`: bisect each top deployment's load factor with replays -> capacity.json."""
    with stage_log(job.log[0]) as log:
        config, top = _capacity_top(job)
        log.info("%d top deployment(s): bisecting their load within the SLA %s", len(top), HOST.where())

        def replay(specs: dict[str, TrialSpec]) -> dict[str, TrialResult]:
            limit = job.params["max_eval_seconds"]
            return dict(evaluate_trials(specs, max_eval_seconds=limit, parallel=job.threads, warm=True))

        def heard(key: str, found: LoadPoint) -> None:
            log.info("%s at %gx load: %s", key[:12], found.factor, found.status)

        result = bisect_capacity(config, top, replay, heard)
        for index, deployment in enumerate(result.deployments):
            log.info("%s: %s", deployment.key[:12], result.sentence(index))
        if result.note:
            log.info("not sized: %s", result.note)
        write_model(job.output["capacity"], result)
