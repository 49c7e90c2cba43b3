"""The search loop, one round of one branch at a time: suggest, then (after the replays) tell.

`suggest_round` rebuilds the branch's Vizier designer from the round history, asks for
candidates and turns each into a trial spec. Candidates that need no replay are answered at
once and told back to the designer before it is asked for replacements (up to 11x the round's
target): a backend that cannot run the projected layout (`unsupported`), a layout over the GPU
budget or with too little KV cache (`infeasible`), a spec that cannot be built (`failed`), and a
trial the branch already ran (`cached`, told with its stored result). Only new, unique specs
go to replay jobs. `tell_round` reads the trial files and appends the round to the history; a
round with fewer new trials than its target stalls the branch, whose later rounds are then empty.
With `sweep.warm_start`, round 0 first replays the seeds the static estimate picks
(search/warm_start.py) and asks the designer only for what they leave to fill.
"""

from __future__ import annotations

import time
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from spica_lib.config import OptimizationGoal, SmartSearchConfig
from spica_lib.config.presets import CompositeEntry
from spica_lib.facts.kv_capacity import KvEstimator
from spica_lib.pools.branches import BranchSpec, PoolRecord
from spica_lib.search.designers import (
    WORST,
    make_designer,
    plain_parameters,
    problem_statement,
    round_seed,
    vizier_trial,
)
from spica_lib.search.history import BranchHistory, Observation, RoundSuggestions, RoundTally, Suggested, observe
from spica_lib.search.metrics import search_objectives
from spica_lib.search.space import BranchSpace
from spica_lib.search.warm_start import warm_start
from spica_lib.trial.evaluate import over_budget, prepare_failure, prepare_trial
from spica_lib.trial.spec import TrialResult, TrialSpec

REPLACEMENT_FACTOR = 11  # a round may ask Vizier for up to 11x its target (the batch + 10x replacements)


class SearchContext(BaseModel):
    """What every round of a run needs besides its branch."""

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)

    config: SmartSearchConfig
    predictor_winners: dict[float, CompositeEntry] = Field(default_factory=dict)
    estimator: KvEstimator | None = None


def suggest_round(
    context: SearchContext,
    spec: BranchSpec,
    pool: list[PoolRecord],
    round_index: int,
    history: BranchHistory | None,
    known_results: dict[str, TrialResult],
    trials_per_job: int | None = None,
) -> tuple[RoundSuggestions, list[TrialSpec]]:
    """Ask Vizier for this round's candidates; return the round file and the new trial specs.

    The new trials go to replay jobs of `trials_per_job` each (all in one job when None).
    """
    sweep = context.config.sweep
    target = sweep.per_round
    empty = RoundSuggestions(
        deployment_mode=spec.deployment_mode, round=round_index, target=target, trials_per_job=trials_per_job
    )
    if spec.status != "ready":
        return empty.model_copy(update={"skipped": f"branch skipped: {spec.skip_reason}"}), []
    if history is not None and history.stalled:
        return empty.model_copy(update={"skipped": f"branch stalled in an earlier round: {history.stall_reason}"}), []
    clock = time.perf_counter()
    space = BranchSpace(spec, pool)
    objectives = search_objectives(context.config.goal)
    problem = problem_statement(space, objectives)
    past = history.observations if history else []
    designer = make_designer(
        sweep.algorithm, problem, round_seed(sweep.seed, spec.deployment_mode, round_index), sweep.seed, len(past)
    )
    _tell(designer, [_completed(o, objectives, sweep.algorithm) for o in past])
    known_keys = {o.key: o for o in past if o.key}
    round_file = empty
    optimizer = time.perf_counter() - clock
    specs: list[TrialSpec] = []
    next_id = len(past) + 1
    cap = REPLACEMENT_FACTOR * target
    seeds: list[dict[str, Any]] = []
    if round_index == 0 and sweep.warm_start:
        round_file.warm_start, seeds = warm_start(context.config, space, target)
        optimizer += round_file.warm_start.estimate_seconds
    while len(specs) < target and round_file.attempts < cap:
        ask = min(target - len(specs), cap - round_file.attempts)
        clock = time.perf_counter()
        seeded, seeds = seeds[:ask], seeds[ask:]
        batch = seeded or [plain_parameters(s) for s in designer.suggest(ask)]
        optimizer += time.perf_counter() - clock
        if not batch:
            break
        round_file.attempts += len(batch)
        answered = []
        for params in batch:
            item, new_spec = _triage(context, space, round_index, next_id, params, known_keys, known_results, specs)
            item.warm_start = bool(seeded)
            next_id += 1
            round_file.suggested.append(item)
            if new_spec is not None:
                specs.append(new_spec)
            elif item.outcome != "duplicate":
                stored = known_results[item.key] if item.outcome == "cached" else None
                observed = observe(item, round_index, context.config.goal, stored)
                answered.append(_completed(observed, objectives, sweep.algorithm))
        clock = time.perf_counter()
        _tell(designer, answered)
        optimizer += time.perf_counter() - clock
    round_file.new_keys = [s.key() for s in specs]
    round_file.optimizer_seconds = optimizer
    batch_of = {key: index for index, keys in enumerate(round_file.batches()) for key in keys}
    for item in round_file.suggested:
        if item.outcome in ("new", "duplicate"):
            item.trial_batch = batch_of[item.key]
    return round_file, specs


def _triage(
    context: SearchContext,
    space: BranchSpace,
    round_index: int,
    vizier_id: int,
    params: dict[str, Any],
    known_keys: dict[str, Observation],
    known_results: dict[str, TrialResult],
    pending: list[TrialSpec],
) -> tuple[Suggested, TrialSpec | None]:
    selection = space.decode(params)
    layout = selection.parallel_config
    base = {
        "vizier_id": vizier_id,
        "params": params,
        "selection": selection.values,
        "layout": layout.label(),
        "projection_distance": selection.projection.distance if selection.projection else None,
        "mode_projected": bool(selection.projection and selection.projection.mode_projected),
    }
    backend = selection.values["backend"]
    record = next((r for r in space.pool if r.config == layout), None)
    if record is None or backend not in record.backends:
        return Suggested(
            **base, outcome="unsupported", reason=f"backend '{backend}' does not support this parallel config"
        ), None
    over = over_budget(layout.total_gpus, space.spec.gpu_budget)
    if over:
        return Suggested(**base, outcome="infeasible", reason=over), None
    try:
        trial = prepare_trial(
            context.config,
            selection.values,
            layout,
            backend_version=space.spec.backend_versions[backend],
            estimator=context.estimator,
            predictor_winners=context.predictor_winners,
        )
    except Exception as exc:  # recorded like a failed replay, without one
        failure = prepare_failure(exc, layout.total_gpus)
        return Suggested(**base, outcome=failure.status, reason=failure.reason), None
    key = trial.key()
    if key in known_results:
        earlier = known_keys.get(key)
        place = {"trial_round": earlier.trial_round, "trial_batch": earlier.trial_batch} if earlier else {}
        return Suggested(**base, key=key, outcome="cached", **place), None
    if any(p.key() == key for p in pending):
        return Suggested(**base, key=key, outcome="duplicate", trial_round=round_index), None
    return Suggested(**base, key=key, outcome="new", trial_round=round_index), trial


def _completed(observation: Observation, objectives: list[tuple[str, bool]], algorithm: str) -> Any:
    if observation.metrics:
        return vizier_trial(observation.vizier_id, observation.params, observation.metrics, None)
    # NSGA2 ranks every trial by its metrics, so an infeasible one still needs (the worst) values.
    worst = {name: (-WORST if maximize else WORST) for name, maximize in objectives} if algorithm == "nsga2" else None
    return vizier_trial(observation.vizier_id, observation.params, worst, observation.reason or observation.status)


def _tell(designer: Any, trials: list[Any]) -> None:
    if not trials:
        return
    from vizier import algorithms as vza

    designer.update(vza.CompletedTrials(trials), vza.ActiveTrials())


def tell_round(
    goal: OptimizationGoal,
    suggestions: RoundSuggestions,
    results: dict[str, TrialResult],
    history: BranchHistory | None,
) -> BranchHistory:
    """Append the round's outcomes to the branch history and decide whether the branch stalls.

    `results` holds the result of every trial the round's suggestions name (new, duplicate, cached).
    """
    previous = history or BranchHistory(deployment_mode=suggestions.deployment_mode, round=-1)
    observations = list(previous.observations)
    counts: dict[str, int] = {}
    for item in suggestions.suggested:
        replayed = item.outcome in ("new", "duplicate", "cached")
        observed = observe(item, suggestions.round, goal, results[item.key] if replayed else None)
        observations.append(observed)
        counts[observed.status] = counts.get(observed.status, 0) + 1
    stalled, stall_reason = previous.stalled, previous.stall_reason
    if not stalled and suggestions.skipped is None and len(suggestions.new_keys) < suggestions.target:
        stalled = True
        stall_reason = (
            f"round {suggestions.round}: {suggestions.attempts} Vizier suggestion(s) gave "
            f"{len(suggestions.new_keys)}/{suggestions.target} new configuration(s)"
        )
    if suggestions.skipped is not None and not stalled:
        stalled, stall_reason = True, suggestions.skipped
    scores = [results[key].score for key in suggestions.new_keys if results[key].status == "feasible"]
    earlier = previous.tallies[-1].best_score if previous.tallies else None
    tally = RoundTally(
        round=suggestions.round,
        attempts=suggestions.attempts,
        new_trials=len(suggestions.new_keys),
        counts=counts,
        optimizer_seconds=suggestions.optimizer_seconds,
        best_score=max([s for s in (*scores, earlier) if s is not None], default=None),
    )
    return BranchHistory(
        deployment_mode=suggestions.deployment_mode,
        round=suggestions.round,
        stalled=stalled,
        stall_reason=stall_reason,
        observations=observations,
        tallies=[*previous.tallies, tally],
    )
