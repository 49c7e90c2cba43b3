"""The bodies of the baselines' two jobs: aiconfigurator's pick (next to the search) and the replays (after it)."""

from __future__ import annotations

from spica_lib.base.artifacts import read_model, write_model
from spica_lib.base.logs import stage_log
from spica_lib.baselines.aiconfigurator_pick import aiconfigurator_pick as pick_for
from spica_lib.baselines.model import AiconfiguratorPick, Baseline, BaselinesResult
from spica_lib.baselines.plan import BaselineCase, baseline_name, plan_baselines, settle
from spica_lib.config.validate import ValidatedConfig
from spica_lib.predictor.plan import LoadPredictorResult
from spica_lib.results.finish import FinishResult
from spica_lib.results.merge import apply_finish
from spica_lib.run.job_args import HOST, JobArgs
from spica_lib.run.jobs.ranked import RankedRun, ranked_run
from spica_lib.run.layout import RunFiles
from spica_lib.trial.evaluate import warm_up_trials
from spica_lib.trial.store import run_replay_job


def aiconfigurator_pick(job: JobArgs) -> None:
    """Rule `aiconfigurator_pick`: the validated config -> baselines/aiconfigurator_pick.json.

    It holds none of Snakemake's cores (workflow/rules/baselines.smk): its search (when its answer is not
    cached) runs beside the rounds from round 0 on instead of taking a branch's core slot."""
    with stage_log(job.log[0]) as log:
        validated = read_model(job.input["config"], ValidatedConfig)
        pick = pick_for(validated.config, validated.catalog)
        if pick.problem:
            log.info("no pick: %s", pick.problem)
        else:
            log.info("%s %s %s in %.1f s; considered %s", pick.deployment_mode, pick.backend,
                     pick.parallel_config, pick.seconds, pick.considered)  # fmt: skip
        write_model(job.output["pick"], pick)


def _cases(job: JobArgs) -> tuple[RankedRun, list[BaselineCase]]:
    run = ranked_run(job)
    ranked = apply_finish(run.best, read_model(job.input["finish"], FinishResult))
    pick = read_model(job.input["pick"], AiconfiguratorPick)
    winners = read_model(job.input["predictor"], LoadPredictorResult).winners()
    return run, plan_baselines(run.config, run.records, [row.key for row in ranked], pick, winners)


def warm_up_for_baselines(job: JobArgs) -> None:
    """Load what the baselines' replays need into the calling process (the warm host, before it forks)."""
    warm_up_trials({case.baseline.name: case.replay for case in _cases(job)[1] if case.replay is not None})


def baselines(job: JobArgs) -> None:
    """Rule `baselines`: replay each baseline that needs it, with the search's workload and SLA -> baselines.json."""
    with stage_log(job.log[0]) as log:
        run, cases = _cases(job)
        # Journaled by trial key (baseline_name): one a branch's finish share replayed ahead is restored.
        names = {baseline_name(case.replay.key()): case.baseline.name for case in cases if case.replay is not None}
        specs = {name: case.replay for case in cases if case.replay is not None for name in [baseline_name(case.replay.key())]}
        log.info("%d baseline(s), %d to replay %s", len(cases), len(specs), HOST.where())
        files = RunFiles(dir=job.params["run_dir"])
        records = run_replay_job(specs, files.journal, files.started, 1, 1,
                                 max_eval_seconds=job.params["max_eval_seconds"], parallel=job.threads)  # fmt: skip
        results = {names[record.key]: record.result for record, _ in records}
        settled: list[Baseline] = []
        for case in cases:
            name = case.baseline.name
            baseline = settle(case, results[name], run.records) if name in results else case.baseline
            settled.append(baseline)
            shown = f"{baseline.result.status} {baseline.result.score}" if baseline.result else "none"
            log.info("%s: %s (%s) -> %s; %s", name, baseline.deployment, baseline.source, shown, baseline.note)
        winner = next(iter(apply_finish(run.best, read_model(job.input["finish"], FinishResult))), None)
        write_model(
            job.output["baselines"], BaselinesResult(winner_key=winner.key if winner else None, baselines=settled)
        )
