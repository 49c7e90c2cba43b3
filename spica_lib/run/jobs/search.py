"""Rules `suggest`, `refill` and `tell`: each round's candidates asked of Vizier, replacements for failed
replays, and the round told back; with the warm-ups the host runs before it forks them.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path

from spica_lib.base.artifacts import read_model, write_model
from spica_lib.base.logs import stage_log
from spica_lib.config import SmartSearchConfig
from spica_lib.traces.scan import scan_trace
from spica_lib.config.validate import ValidatedConfig
from spica_lib.facts.kv_capacity import KvEstimator
from spica_lib.pools.branches import BranchSpec
from spica_lib.pools.table import read_pool
from spica_lib.predictor.plan import LoadPredictorResult
from spica_lib.run.job_args import HOST, JobArgs
from spica_lib.run.jobs.ranked import told_records
from spica_lib.run.layout import RunFiles
from spica_lib.run.status import progress_text, run_status
from spica_lib.search.designers import import_designers
from spica_lib.search.history import BranchHistory, RoundSuggestions
from spica_lib.search.rounds import (
    RivalScores,
    SearchContext,
    in_flight_duplicate,
    refill_round,
    rival_scores,
    suggest_round,
    tell_round,
)
from spica_lib.search.space import BranchSpace
from spica_lib.search.warm_start import seed_parameters, warm_start
from spica_lib.trial.evaluate import prepare_trial, warm_up_trials
from spica_lib.trial.score import score_text
from spica_lib.trial.spec import TrialSpec
from spica_lib.trial.store import read_trials


def suggest(job: JobArgs) -> None:
    """Checkpoint `suggest`: branch + history -> rounds/<branch>/<k>/suggestions.json and specs/<key>.json."""
    files = RunFiles(dir=job.params["run_dir"])
    branch, round_index = job.wildcards["branch"], int(job.wildcards["round"])
    with stage_log(job.log[0]) as log:
        config = read_model(job.input["config"], ValidatedConfig).config
        spec = read_model(job.input["branch"], BranchSpec)
        pool = read_pool(job.input["pool"], spec.deployment_mode) if spec.status == "ready" else []
        history = _previous(job)
        known = read_trials(files.trial_files(branch, history.observations if history else []))
        context = _context(job, config, spec)
        known_results = {k: r.result for k, r in known.items()}
        per_job, in_flight = job.params["trials_per_job"], _in_flight(job)
        suggestions, specs = suggest_round(
            context, spec, pool, round_index, history, known_results, trials_per_job=per_job, in_flight=in_flight,
            rivals=_rivals(files, job),
        )
        # What the warm host loaded for this job before it forked it (the designer, round 0's estimate) is the
        # optimizer's time too, as it would be in a job of its own.
        suggestions.optimizer_seconds += HOST.prepare_seconds
        Path(job.output["specs"]).mkdir(parents=True, exist_ok=True)  # declared even when the round is empty
        for trial in specs:
            write_model(files.spec(branch, round_index, trial.key()), trial)
        write_model(job.output["suggestions"], suggestions)
        outcomes: dict[str, int] = {}
        for item in suggestions.suggested:
            outcomes[item.outcome] = outcomes.get(item.outcome, 0) + 1
        log.info("%s round %d: %d suggestion(s) -> %s", branch, round_index, suggestions.attempts, outcomes)
        if HOST.prepare_seconds:
            log.info("designer and static estimate prepared in %.2f s %s", HOST.prepare_seconds, HOST.where())
        if suggestions.skipped:
            log.info("no work: %s", suggestions.skipped)


def refill(job: JobArgs) -> None:
    """Checkpoint `refill`: the round's earlier passes and their trials -> a pass of replacements for the
    failed or timed-out replays of the last one (rounds/<branch>/<k>/refill/<p>/suggestions.json, specs/)."""
    files = RunFiles(dir=job.params["run_dir"])
    branch = job.wildcards["branch"]
    with stage_log(job.log[0]) as log:
        config = read_model(job.input["config"], ValidatedConfig).config
        spec = read_model(job.input["branch"], BranchSpec)
        pool = read_pool(job.input["pool"], spec.deployment_mode)
        history = _previous(job)
        passes = [read_model(path, RoundSuggestions) for path in job.inputs("passes")]
        round_index = passes[0].round
        # The history's trials too (as suggest reads them): a replacement that proposes one of them is cached,
        # or moved off it, not taken for a new trial. A round in flight's trials may still be replaying.
        places = [item for p in passes for item in p.suggested if not in_flight_duplicate(item, round_index)]
        places += history.observations if history else []
        results = {k: r.result for k, r in read_trials(files.trial_files(branch, places)).items()}
        context = _context(job, config, spec)
        per_job, in_flight = job.params["trials_per_job"], _in_flight(job)
        suggestions, specs = refill_round(
            context, spec, pool, history, passes, results, trials_per_job=per_job, in_flight=in_flight
        )
        suggestions.optimizer_seconds += HOST.prepare_seconds  # the designer's import in the warm host, if it did
        Path(job.output["specs"]).mkdir(parents=True, exist_ok=True)
        for trial in specs:
            write_model(Path(job.output["specs"]) / f"{trial.key()}.json", trial)
        write_model(job.output["suggestions"], suggestions)
        log.info(
            "%s round %d, refill %d: %d failed replay(s) to replace -> %d new trial(s) from %d suggestion(s)",
            branch,
            suggestions.round,
            suggestions.refill,
            len(suggestions.replaces),
            len(specs),
            suggestions.attempts,
        )


def _context(job: JobArgs, config: SmartSearchConfig, spec: BranchSpec) -> SearchContext:
    space = config.search_space
    return SearchContext(
        config=config,
        predictor_winners=read_model(job.input["predictor"], LoadPredictorResult).winners(),
        estimator=KvEstimator(space.model_name, space.hardware_sku, spec.backend_versions),
    )


def prepare_suggest(job: JobArgs) -> None:
    """What a suggest job needs, loaded into the calling process (the warm host, before it forks the job).

    The sweep's Vizier designer (imported once). The run's traces, hashed and parsed: every trial key names
    its trace by content, so a large trace is read once per run, not once per round. For round 0 with the
    warm start, the static estimate of the branch's pool: it compiles aiconfigurator's engines and loads its
    perf DBs (seconds), which the host then keeps, so each branch's round-0 suggest forks with them (the next
    branch's compiles only the shapes the first did not have), and Dynamo's warm-ups, which read the same
    perf DBs, cost less after it.
    """
    config = read_model(job.input["config"], ValidatedConfig).config
    import_designers(config.sweep.algorithm)
    for workload in [config.workload, *(config.workloads or [])]:
        if workload.trace_path is not None:
            scan_trace(workload.trace_path)
    if job.wildcards.get("round") != "0" or not config.sweep.warm_start:
        return
    spec = read_model(job.input["branch"], BranchSpec)
    if spec.status == "ready":
        space = BranchSpace(spec, read_pool(job.input["pool"], spec.deployment_mode))
        warm_start(config, space, config.sweep.per_round * config.sweep.rounds_in_flight)  # the suggest's own call


def warm_up_for_branch(job: JobArgs) -> list[Callable[[], None]]:
    """Dynamo's warm-up for each backend of a suggest's branch (a few requests on one layout, knobs at their
    first choice, as round 0's seeds replay), to run one by one in the calling process (the warm host, while
    the suggest runs).

    The round's replay jobs then fork warm whichever backend the round picks, and one first picked in a later
    round costs that round no warm-up. Each is done once per host: later rounds find it done. A planner's
    warm-up (seconds: Dynamo's planner loads too) is left to the first replay job that needs it, so that it
    never holds up a job that does not.
    """
    config = read_model(job.input["config"], ValidatedConfig).config
    spec = read_model(job.input["branch"], BranchSpec)
    if spec.status != "ready":
        return []
    space = BranchSpace(spec, read_pool(job.input["pool"], spec.deployment_mode))
    return [functools.partial(_warm_up, trial) for trial in _trial_per_backend(_context(job, config, spec), space)]


def _warm_up(trial: TrialSpec) -> None:
    warm_up_trials({trial.key(): trial})


def prepare_refill(job: JobArgs) -> None:
    """The sweep's Vizier designer, imported into the calling process (the warm host, before it forks a refill)."""
    import_designers(read_model(job.input["config"], ValidatedConfig).config.sweep.algorithm)


def _trial_per_backend(context: SearchContext, space: BranchSpace) -> list[TrialSpec]:
    """A trial of the branch on each of its backends: the first layout of the pool that builds, first knobs."""
    trials = []
    for backend in space.spec.backends:
        for record in (r for r in space.pool if backend in r.backends):
            selection = space.decode(seed_parameters(space, record.config, backend))
            try:
                trials.append(
                    prepare_trial(
                        context.config,
                        selection.values,
                        selection.parallel_config,
                        backend_version=space.spec.backend_versions[backend],
                        estimator=context.estimator,
                        predictor_winners=context.predictor_winners,
                    )
                )
                break
            except Exception:  # e.g. no KV room on this layout: the next one
                continue
    return trials


def tell(job: JobArgs) -> None:
    """Rule `tell`: suggestions + trial files -> rounds/<branch>/<k>/observations.json (the branch history)."""
    files = RunFiles(dir=job.params["run_dir"])
    with stage_log(job.log[0]) as log:
        config = read_model(job.input["config"], ValidatedConfig).config
        passes = [read_model(path, RoundSuggestions) for path in job.inputs("suggestions")]
        suggestions = passes[0]
        history = _previous(job)
        places = [item for p in passes for item in p.suggested]
        records = read_trials(files.trial_files(job.wildcards["branch"], places))
        updated = tell_round(config.goal, passes, {k: r.result for k, r in records.items()}, history)
        write_model(job.output["history"], updated)
        tally = updated.tallies[-1]
        best = "none feasible yet" if tally.best_score is None else score_text(tally.best_score, config.goal.target)
        # One progress line per round, on the console as well as in the log.
        progress = (
            f"spica {updated.deployment_mode} round {suggestions.round}: {tally.new_trials} new trial(s)"
            + (f" ({tally.refills} refill pass(es) for failed replays)" if tally.refills else "")
            + f", best {best}"
        )
        progress += f"; {_progress(files.dir)}"
        print(progress, flush=True)
        log.info("%s; %s", progress, tally.counts)
        if updated.stalled and (history is None or not history.stalled):
            log.info("branch %s stops: %s", updated.deployment_mode, updated.stall_reason)


def _progress(run_dir: str) -> str:
    """The sweep's progress for the per-round line (run/status.py); never fails the round."""
    try:
        return progress_text(run_status(run_dir))
    except Exception as error:  # a progress line is not worth a failed round
        return f"progress unknown ({type(error).__name__})"


def _in_flight(job: JobArgs) -> list[RoundSuggestions]:
    """The first passes of the rounds that replay while this one is asked for (sweep.rounds_in_flight)."""
    return [read_model(path, RoundSuggestions) for path in job.inputs("in_flight")]


def _rivals(files: RunFiles, job: JobArgs) -> RivalScores:
    """The other branches' told trials the round's prune bar counts (search/rounds.py `rival_scores`)."""
    histories = [read_model(path, BranchHistory) for path in job.inputs("rivals")]
    return rival_scores(histories, {key: record.result for key, record in told_records(files, histories).items()})


def _previous(job: JobArgs) -> BranchHistory | None:
    previous = job.inputs("previous")
    return read_model(previous[0], BranchHistory) if previous else None
