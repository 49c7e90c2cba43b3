"""The search loop, one round of one branch at a time: suggest, then (after the replays) tell.

`suggest_round` rebuilds the branch's Vizier designer from the round history, asks for
candidates and turns each into a trial spec. Candidates that need no replay are answered at
once and told back to the designer before it is asked for replacements (up to 11x the round's
target): a backend that cannot run the projected layout (`unsupported`), a layout over the GPU
budget or with too little KV cache (`infeasible`), a spec that cannot be built (`failed`), and a
trial the branch already ran (`cached`, told with its stored result). A proposal of a trial already
replayed or replaying is also moved to the nearest layout not taken yet (search/triage.py), so a
designer that repeats itself does not stall the branch. Only new, unique specs go to replay jobs.
`tell_round` reads the trial files and appends the round to the history; a round with fewer new
trials than its target stalls the branch, whose later rounds are then empty.
A new trial whose replay fails or times out says nothing of the candidate: `refill_round` asks for
a replacement in the same round (a refill pass, told the failure), within the same 11x cap, and
only replays that did not fail count toward the round's target. A failure that is a property of the
layout (the replay refused it, facts/replay_limits.py) is remembered for the branch: the same layout
and backend are answered `unsupported` under any other knobs, without a replay.
With `sweep.warm_start`, round 0 first replays the seeds the static estimate picks
(search/warm_start.py) and asks the designer only for what they leave to fill.
With a goodput goal, each round carries its prune bar (`prune_bar`): the k-th best feasible score of
the history the round is suggested from and of the other branches' histories one round older
(`rival_scores`; k: trial/screen.py, at least the finish's top). A replay of the round whose score
certainly stays below it is stopped and recorded `pruned` (replay/early_stop.py): it cannot rank in
the sweep's top k, which is one ranking across the branches. The other branches count one round later
than the branch's own so that a branch seldom waits for another (it would have to fall a whole round
behind), and the bar still depends on the round number alone. The bar is fixed by the round number (the
histories told before the round, never the trials of the round itself or of rounds in flight, whichever
replay finishes first), and its refill passes keep it: a seed still fixes the search, and a killed
sweep resumes into the same trials with the same bars. A pruned trial is not infeasible for the
search: the designer is told its optimistic bound (search/metrics.py).
From round 1, each round also carries its prefix budget (`prefix_budget`, replay/stall.py): a time limit on
a replay's prefix from the slowest prefix of the same histories, fixed by the round like the bar.
With `sweep.rounds_in_flight` W > 1, round k is asked for once round k - W is told: its history is
every round up to k - W, and the new trials of rounds k - W + 1 .. k - 1 (still in flight) are the
designer's active trials; a suggestion of one of them is a duplicate of that round's trial (told
once tell reaches this round, by when that round is told too). Rounds 0 .. W - 1 share the warm start's
seeds in turn.
"""

from __future__ import annotations

import time
from typing import Any, NamedTuple

from spica_lib.config import OptimizationGoal, SmartSearchConfig
from spica_lib.pools.branches import BranchSpec, PoolRecord
from spica_lib.replay.stall import PREFIX_FACTOR
from spica_lib.search.designers import (
    WORST,
    active_trial,
    make_designer,
    plain_parameters,
    problem_statement,
    round_seed,
    vizier_trial,
)
from spica_lib.search.history import (
    NEW_TRIAL,
    BranchHistory,
    Observation,
    RoundSuggestions,
    RoundTally,
    Suggested,
    observe,
)
from spica_lib.search.metrics import search_objectives
from spica_lib.search.space import BranchSpace
from spica_lib.search.triage import SearchContext, Taken, move, refine, refused_layouts, triage
from spica_lib.search.warm_start import share_of_round, warm_start
from spica_lib.trial.outcome import first_same, result_outcome
from spica_lib.trial.screen import PruneBar, prune_rank
from spica_lib.trial.spec import TrialResult, TrialSpec

REPLACEMENT_FACTOR = 11  # a round may ask Vizier for up to 11x its target (the batch + 10x replacements)
REPLACED_STATUSES = ("failed", "timed_out")  # a replay that says nothing of the candidate is replaced in its round
REPEATS = ("cached", "duplicate")  # a proposal of a trial already taken: moved to the nearest one not taken


def suggest_round(
    context: SearchContext,
    spec: BranchSpec,
    pool: list[PoolRecord],
    round_index: int,
    history: BranchHistory | None,
    known_results: dict[str, TrialResult],
    trials_per_job: int | None = None,
    in_flight: list[RoundSuggestions] | None = None,
    rivals: RivalScores | None = None,
) -> tuple[RoundSuggestions, list[TrialSpec]]:
    """Ask Vizier for this round's candidates; return the round file and the new trial specs.

    The new trials go to replay jobs of `trials_per_job` each (all in one job when None). `in_flight`:
    the first passes of the rounds that replay while this one is asked for (sweep.rounds_in_flight).
    `rivals`: the other branches' feasible outcomes the prune bar counts too (`rival_scores`).
    """
    sweep = context.config.sweep
    target = sweep.per_round
    in_flight = in_flight or []
    empty = RoundSuggestions(
        deployment_mode=spec.deployment_mode,
        round=round_index,
        target=target,
        trials_per_job=trials_per_job,
        in_flight=[p.round for p in in_flight],
        prune=prune_bar(context.config, history, known_results, rivals),
        prefix_seconds=prefix_budget(history, known_results, rivals),
    )
    if spec.status != "ready":
        return empty.model_copy(update={"skipped": f"branch skipped: {spec.skip_reason}"}), []
    if history is not None and history.stalled:
        return empty.model_copy(update={"skipped": f"branch stalled in an earlier round: {history.stall_reason}"}), []
    seeds: list[dict[str, Any]] = []
    space = BranchSpace(spec, pool)
    if round_index == 0 and sweep.warm_start:
        # The rounds that start with round 0 (no history yet) take the estimate's seeds in turn.
        picked, seeds = warm_start(context.config, space, target * sweep.rounds_in_flight)
        seeds = seeds[:target]
        empty.warm_start = picked.model_copy(
            update={"picks": picked.picks[:target], "left_for_rounds_in_flight": picked.picks[target:]}
        )
        empty.optimizer_seconds += picked.estimate_seconds
    elif round_index < sweep.rounds_in_flight and sweep.warm_start and in_flight[0].warm_start is not None:
        empty.warm_start, seeds = share_of_round(space, in_flight[0].warm_start, round_index, target)
    return _ask(context, space, empty, history, [], known_results, REPLACEMENT_FACTOR * target, seeds, in_flight)


def refill_round(
    context: SearchContext,
    spec: BranchSpec,
    pool: list[PoolRecord],
    history: BranchHistory | None,
    passes: list[RoundSuggestions],
    results: dict[str, TrialResult],
    trials_per_job: int | None = None,
    in_flight: list[RoundSuggestions] | None = None,
) -> tuple[RoundSuggestions, list[TrialSpec]]:
    """The next pass of a round: replacements for the last pass's failed or timed-out replays.

    The designer is told everything the round's earlier passes found, failures included, then asked
    for one replacement per failure, within what is left of the round's 11x cap. `results` holds the
    result of every trial the earlier passes name (and may hold more). `in_flight`: the same earlier
    rounds as the round's first pass had in flight (a later round's trials are not known here: if a
    replacement is one of them, both replay, and the later one is told as a cache hit).
    """
    first = passes[0]
    needed = replacements_needed(passes, results)
    refill = RoundSuggestions(
        deployment_mode=first.deployment_mode,
        round=first.round,
        refill=len(passes),
        target=needed,
        first_batch=sum(len(p.batches()) for p in passes),
        trials_per_job=trials_per_job,
        replaces=[key for key in passes[-1].new_keys if results[key].status in REPLACED_STATUSES],
        in_flight=first.in_flight,
        prune=first.prune,  # the round's bar: the history before the round, not what its first pass found
        prefix_seconds=first.prefix_seconds,
    )
    if needed == 0:
        return refill, []
    told = [
        _observed(item, first.round, context.config.goal, results)
        for p in passes
        for item in p.suggested
        if not in_flight_duplicate(item, first.round)  # still replaying: an active trial, no result yet
    ]
    cap = REPLACEMENT_FACTOR * first.target - sum(p.attempts for p in passes)
    return _ask(context, BranchSpace(spec, pool), refill, history, told, results, cap, [], in_flight or [])


class RivalScores(NamedTuple):
    """The other branches' feasible outcomes a round's prune bar counts (key -> trial/outcome.py's outcome, its
    score first), the last round of each branch they come from, and the CPU seconds of each told replay's
    prefix (its pace checkpoint) the round's prefix budget counts."""

    outcomes: dict[str, list]
    told: dict[str, int]
    prefix_cpu: dict[str, float] = {}


def rival_scores(histories: list[BranchHistory], results: dict[str, TrialResult]) -> RivalScores:
    """The feasible scores of the trials told in `histories` (their trial results in `results`): the other
    branches' for a round's prune bar, and the branch's own inside `prune_bar`; and their prefixes' CPU."""
    outcomes: dict[str, list] = {}
    prefix_cpu: dict[str, float] = {}
    for history in histories:
        for o in history.observations:
            result = results.get(o.key or "")
            if o.status in ("feasible", "cache_hit") and result is not None and result.score is not None:
                outcomes[o.key] = result_outcome(result)
            if result is not None and result.checkpoint is not None:
                prefix_cpu[o.key] = result.checkpoint.cpu_seconds
    told = {h.deployment_mode: h.round for h in histories}
    return RivalScores(outcomes=outcomes, told=told, prefix_cpu=prefix_cpu)


def prefix_budget(
    history: BranchHistory | None, known_results: dict[str, TrialResult], rivals: RivalScores | None = None
) -> float | None:
    """The round's prefix budget (replay/stall.py): PREFIX_FACTOR times the slowest prefix among the replays
    told in `history` and the other branches' `rivals` (None before any reached its pace checkpoint). The
    same histories as the prune bar's, so it too depends on the round number alone."""
    own = rival_scores([history] if history is not None else [], known_results)
    seen = [*own.prefix_cpu.values(), *(rivals.prefix_cpu.values() if rivals is not None else [])]
    return PREFIX_FACTOR * max(seen) if seen else None


def prune_bar(
    config: SmartSearchConfig,
    history: BranchHistory | None,
    known_results: dict[str, TrialResult],
    rivals: RivalScores | None = None,
) -> PruneBar | None:
    """The round's prune bar: the k-th best feasible score among the distinct outcomes of the trials of `history`
    and of the other branches' `rivals` (None before they hold k of them, without a screen, or for a goal whose
    score has no sound bound). Distinct as the finish counts its top (trial/outcome.py): two trials that replayed
    to the same numbers are one deployment, so twins never fill the k places ahead of a trial the finish would take."""
    goal = config.goal
    if goal.is_pareto or not goal.target.needs_sla or config.sweep.screen_fraction is None:
        return None
    own = rival_scores([history] if history is not None else [], known_results)
    others = rivals if rivals is not None else RivalScores(outcomes={}, told={})
    outcomes = sorted({**own.outcomes, **others.outcomes}.values(), key=lambda item: item[0], reverse=True)
    scores = [item[0] for item, twin in zip(outcomes, first_same(outcomes), strict=True) if twin is None]
    rank = prune_rank(config)
    if len(scores) < rank:
        return None
    return PruneBar(below=scores[rank - 1], rank=rank, told={**others.told, **own.told})


def best_observation(
    goal: OptimizationGoal, past: list[Observation], known_results: dict[str, TrialResult]
) -> Observation | None:
    """The told trial with the best feasible score (the first told on a tie); None for a Pareto goal or before
    any trial is feasible."""
    if goal.is_pareto:
        return None
    scored = [o for o in past if o.key and o.layout and o.status in ("feasible", "cache_hit")
              and o.key in known_results and known_results[o.key].score is not None]  # fmt: skip
    return max(scored, key=lambda o: known_results[o.key].score, default=None)


def in_flight_duplicate(item: Suggested, round_index: int) -> bool:
    """A suggestion of a trial that a round in flight replays (its result may not exist before tell)."""
    return item.outcome == "duplicate" and item.trial_round != round_index


def replacements_needed(passes: list[RoundSuggestions], results: dict[str, TrialResult]) -> int:
    """How many of the last pass's new trials failed or timed out, within what is left of the round's cap."""
    if not passes or passes[0].skipped is not None:
        return 0
    failed = sum(results[key].status in REPLACED_STATUSES for key in passes[-1].new_keys)
    left = REPLACEMENT_FACTOR * passes[0].target - sum(p.attempts for p in passes)
    return max(0, min(failed, left))


def _observed(
    item: Suggested, round_index: int, goal: OptimizationGoal, results: dict[str, TrialResult]
) -> Observation:
    replayed = item.outcome in (*NEW_TRIAL, "duplicate", "cached")
    return observe(item, round_index, goal, results[item.key] if replayed else None)


def _ask(
    context: SearchContext,
    space: BranchSpace,
    round_file: RoundSuggestions,
    history: BranchHistory | None,
    told: list[Observation],
    known_results: dict[str, TrialResult],
    cap: int,
    seeds: list[dict[str, Any]],
    in_flight: list[RoundSuggestions],
) -> tuple[RoundSuggestions, list[TrialSpec]]:
    """Fill `round_file` with new trials up to its target: seeds first, then the designer, asking again
    (after telling it the answers) for what was answered without a replay, up to `cap` suggestions.

    The designer numbers trials by position: the told ones, then the rounds in flight's (active), then
    this pass's."""
    sweep = context.config.sweep
    target, round_index = round_file.target, round_file.round
    clock = time.perf_counter()
    objectives = search_objectives(context.config.goal)
    problem = problem_statement(space, objectives)
    past = [*(history.observations if history else []), *told]
    active = [item for p in in_flight for item in p.suggested if item.outcome in NEW_TRIAL]
    designer = make_designer(
        sweep.algorithm,
        problem,
        round_seed(sweep.seed, space.spec.deployment_mode, round_index, round_file.refill),
        sweep.seed,
        len(past) + sum(p.attempts for p in in_flight),
    )
    _tell(
        designer,
        [_completed(o, objectives, sweep.algorithm, number) for number, o in enumerate(past, start=1)],
        [active_trial(number, item.params) for number, item in enumerate(active, start=len(past) + 1)],
    )
    taken = Taken(
        known_keys={o.key: o for o in past if o.key},
        known_results=known_results,
        in_flight={item.key: item for item in active},
        refused=refused_layouts(past),
    )
    optimizer = time.perf_counter() - clock
    specs: list[TrialSpec] = []
    next_id = len(past) + len(active) + 1
    incumbent = best_observation(context.config.goal, past, known_results)
    if round_file.refill == 0 and not seeds and target >= 2 and incumbent is not None:
        refined = refine(context, space, round_index, next_id, incumbent, taken)
        if refined is not None:  # one slot of local search; the designer asks for the rest
            round_file.suggested.append(refined[0])
            specs.append(refined[1])
            round_file.attempts += 1
            next_id += 1
    while len(specs) < target and round_file.attempts < cap:
        ask = min(target - len(specs), cap - round_file.attempts)
        clock = time.perf_counter()
        seeded, seeds = seeds[:ask], seeds[ask:]
        batch = seeded or [space.complete(plain_parameters(s)) for s in designer.suggest(ask)]
        optimizer += time.perf_counter() - clock
        if not batch:
            break
        round_file.attempts += len(batch)
        answered = []
        for params in batch:
            item, new_spec = triage(context, space, round_index, next_id, params, taken)
            item.warm_start = bool(seeded)
            next_id += 1
            round_file.suggested.append(item)
            if new_spec is not None:
                specs.append(new_spec)
                continue
            if item.outcome != "duplicate":
                stored = known_results[item.key] if item.outcome == "cached" else None
                observed = observe(item, round_index, context.config.goal, stored)
                answered.append(_completed(observed, objectives, sweep.algorithm, item.vizier_id))
            # Each proposal fills at most one of the batch's slots, so a move never overshoots the target.
            moved = move(context, space, round_index, next_id, item, taken) if item.outcome in REPEATS else None
            if moved is not None:
                round_file.suggested.append(moved[0])
                specs.append(moved[1])
                next_id += 1
        clock = time.perf_counter()
        _tell(designer, answered)
        optimizer += time.perf_counter() - clock
    round_file.new_keys = [s.key() for s in specs]
    round_file.optimizer_seconds += optimizer
    batch_of = {key: index for index, keys in zip(round_file.batch_numbers(), round_file.batches()) for key in keys}
    for item in round_file.suggested:
        if item.outcome in (*NEW_TRIAL, "duplicate") and item.trial_round == round_index:
            item.trial_batch = batch_of[item.key]
    return round_file, specs


def _completed(observation: Observation, objectives: list[tuple[str, bool]], algorithm: str, number: int) -> Any:
    if observation.metrics:
        return vizier_trial(number, observation.params, observation.metrics, None)
    # NSGA2 ranks every trial by its metrics, so an infeasible one still needs (the worst) values.
    worst = {name: (-WORST if maximize else WORST) for name, maximize in objectives} if algorithm == "nsga2" else None
    return vizier_trial(number, observation.params, worst, observation.reason or observation.status)


def _tell(designer: Any, trials: list[Any], active: list[Any] | None = None) -> None:
    if not trials and not active:
        return
    from vizier import algorithms as vza

    designer.update(vza.CompletedTrials(trials), vza.ActiveTrials(active or []))


def tell_round(
    goal: OptimizationGoal,
    passes: list[RoundSuggestions],
    results: dict[str, TrialResult],
    history: BranchHistory | None,
) -> BranchHistory:
    """Append the round (its first pass and any refills) to the branch history and decide whether the branch stalls.

    `results` holds the result of every trial the round's suggestions name (new, duplicate, cached).
    A round stalls its branch when fewer of its new trials replayed (did not fail or time out) than
    its target: the designer found no more, or the 11x cap ran out on replacements.
    """
    first = passes[0]
    previous = history or BranchHistory(deployment_mode=first.deployment_mode, round=-1)
    observations = list(previous.observations)
    # Rounds in flight: a replacement of an earlier round may have replayed a later round's new trial too.
    replayed_before = {
        o.key for o in observations if o.status in ("feasible", "infeasible", "failed", "timed_out", "pruned")
    }
    counts: dict[str, int] = {}
    for item in (item for p in passes for item in p.suggested):
        if item.outcome in NEW_TRIAL and item.key in replayed_before:
            item = item.model_copy(update={"outcome": "duplicate"})
        observed = _observed(item, first.round, goal, results)
        observations.append(observed)
        counts[observed.status] = counts.get(observed.status, 0) + 1
    new_keys = [key for p in passes for key in p.new_keys]
    replayed = [key for key in new_keys if results[key].status not in REPLACED_STATUSES]
    attempts = sum(p.attempts for p in passes)
    stalled, stall_reason = previous.stalled, previous.stall_reason
    if not stalled and first.skipped is None and len(replayed) < first.target:
        stalled = True
        stall_reason = (
            f"round {first.round}: {attempts} Vizier suggestion(s) gave {len(replayed)}/{first.target} new "
            f"configuration(s) that replayed ({len(new_keys) - len(replayed)} failed or timed out)"
        )
    if first.skipped is not None and not stalled:
        stalled, stall_reason = True, first.skipped
    scores = [results[key].score for key in new_keys if results[key].status == "feasible"]
    earlier = previous.tallies[-1].best_score if previous.tallies else None
    tally = RoundTally(
        round=first.round,
        attempts=attempts,
        new_trials=len(new_keys),
        counts=counts,
        optimizer_seconds=sum(p.optimizer_seconds for p in passes),
        best_score=max([s for s in (*scores, earlier) if s is not None], default=None),
        refills=len(passes) - 1,
        moved=sum(item.outcome == "moved" for p in passes for item in p.suggested),
    )
    return BranchHistory(
        deployment_mode=first.deployment_mode,
        round=first.round,
        stalled=stalled,
        stall_reason=stall_reason,
        observations=observations,
        tallies=[*previous.tallies, tally],
    )
