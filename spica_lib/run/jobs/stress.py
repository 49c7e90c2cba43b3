"""The stress job's body: the finished top under perturbed step times (results/stress.py) -> stress.json."""

from __future__ import annotations

from spica_lib.base.artifacts import read_model, write_model
from spica_lib.base.logs import stage_log
from spica_lib.results.finish import FinishResult
from spica_lib.results.merge import apply_finish
from spica_lib.results.stress import first_replays, second_replays, stress_bars, stress_specs, stressed
from spica_lib.run.job_args import HOST, JobArgs
from spica_lib.run.jobs.ranked import ranked_run
from spica_lib.run.layout import RunFiles
from spica_lib.trial.evaluate import warm_up_trials
from spica_lib.trial.screen import PruneBar
from spica_lib.trial.spec import TrialResult, TrialSpec
from spica_lib.trial.store import run_replay_job


def _stress_top(job: JobArgs) -> tuple[dict[str, TrialSpec], float, dict[str, float | None]]:
    """The top `sweep.stress_top` deployments in the finish's order (key -> spec), the band, and each one's
    unperturbed score on the search's traffic (its search replay)."""
    run = ranked_run(job)
    ranked = apply_finish(run.best, read_model(job.input["finish"], FinishResult))
    sweep = run.config.sweep
    rows = ranked[: sweep.stress_top]
    unperturbed = {row.key: run.records[row.key].result.score for row in rows}
    return {row.key: run.records[row.key].spec for row in rows}, sweep.stress_band_roles or float(sweep.stress_band or 0), unperturbed


def warm_up_for_stress(job: JobArgs) -> None:
    """Load what the stress replays need into the calling process (the warm host, before it forks)."""
    top, band, _ = _stress_top(job)
    warm_up_trials(stress_specs(top, band))


def stress(job: JobArgs) -> None:
    """Rule `stress`: the top deployments with perturbed prefill and decode step times -> stress.json."""
    with stage_log(job.log[0]) as log:
        top, band, unperturbed = _stress_top(job)
        replays = first_replays(top, band) if len(top) > 1 else {}
        log.info("%d top deployment(s), %d replay(s) with step times +/-%g first %s", len(top), len(replays), band, HOST.where())
        limit = job.params["max_eval_seconds"]
        results = _replayed(job, replays, limit)
        if len(top) > 1:
            # Now #1's perturbed scores are known: a bounded replay (results/stress.py) runs only if it could overtake,
            # and a prunable one is stopped once it certainly cannot.
            more = second_replays(top, band, results, unperturbed)
            bars = stress_bars(top, band, results)
            skipped = len(stress_specs(top, band)) - len(results) - len(more)
            log.info("%d more replay(s), %d with #1's score as their bar; %d skipped: bounded below #1 without a "
                     "replay", len(more), len([name for name in more if name in bars]), skipped)  # fmt: skip
            results.update(_replayed(job, more, limit, bars))
        result = stressed(top, band, results, unperturbed)
        for score in result.scores:
            log.info("%s under %s: %s %s", score.key[:12], score.perturbation.name, score.status, score.score)
        log.info("%s", result.sentence or "fewer than 2 deployments to compare: nothing stressed")
        write_model(job.output["stress"], result)


def _replayed(
    job: JobArgs, replays: dict[str, TrialSpec], limit: float | None, bars: dict[str, PruneBar] | None = None
) -> dict[str, TrialResult]:
    """The stress replays' results by name, each journaled as it ends: a killed stress test resumes without them,
    and one a branch's finish share replayed ahead (results/finish_share.py) is restored, not replayed. `bars`:
    a replay's prune bar by name (#1's score under its perturbation; its journaled result was judged by it)."""
    files = RunFiles(dir=job.params["run_dir"])
    records = run_replay_job(
        replays, files.journal, files.started, 1, 1, max_eval_seconds=limit, parallel=job.threads, prune=bars
    )
    return {record.key: record.result for record, _ in records}
