"""A branch's rounds driven in one process, for benchmarks and tests: the same suggest -> replay ->
refill -> tell sequence the workflow runs as Snakemake jobs, with a caller-given replay."""

from __future__ import annotations

from collections.abc import Callable

from spica_lib.pools.branches import BranchSpec, PoolRecord
from spica_lib.search.history import BranchHistory, RoundSuggestions
from spica_lib.search.rounds import (
    SearchContext,
    in_flight_duplicate,
    refill_round,
    replacements_needed,
    suggest_round,
    tell_round,
)
from spica_lib.trial.spec import TrialRecord, TrialResult, TrialSpec

Replay = Callable[[TrialSpec], TrialResult]
ROUND_BEFORE = "round before"  # run_round's default `told`: the round is suggested from `history` itself


def run_round(
    context: SearchContext,
    spec: BranchSpec,
    pool: list[PoolRecord],
    round_index: int,
    history: BranchHistory | None,
    store: dict[str, TrialRecord],
    replay: Replay,
    told: BranchHistory | None | str = ROUND_BEFORE,
    in_flight: list[RoundSuggestions] | None = None,
) -> tuple[BranchHistory, list[RoundSuggestions]]:
    """One round of one branch; new trials are added to `store` (key -> record).

    `history` is the round before's (what tell appends to); the round is suggested from `told` (the
    history of round k - rounds_in_flight; by default `history` itself) with `in_flight` replaying."""
    told = history if told == ROUND_BEFORE else told
    told_keys = {o.key for o in (told.observations if told else []) if o.key}

    def known(passes: list[RoundSuggestions]) -> dict[str, TrialResult]:
        """What a suggest or refill job reads: the told history's trials and its own round's (not a round in
        flight's: its trials may still be replaying)."""
        keys = told_keys | {i.key for p in passes for i in p.suggested if i.key and not in_flight_duplicate(i, k)}
        return {key: store[key].result for key in keys if key in store}

    k = round_index
    suggestions, specs = suggest_round(context, spec, pool, k, told, known([]), in_flight=in_flight)
    passes = [suggestions]
    while True:
        for trial in specs:
            store[trial.key()] = TrialRecord(key=trial.key(), spec=trial, result=replay(trial))
        if not replacements_needed(passes, known(passes)):
            break
        refill, specs = refill_round(context, spec, pool, told, passes, known(passes), in_flight=in_flight)
        passes.append(refill)
        if not specs:
            break
    results = {key: record.result for key, record in store.items()}
    return tell_round(context.config.goal, passes, results, history), passes


def run_search(
    context: SearchContext, spec: BranchSpec, pool: list[PoolRecord], store: dict[str, TrialRecord], replay: Replay
) -> tuple[BranchHistory, list[list[RoundSuggestions]]]:
    """Every round of one branch, `sweep.rounds_in_flight` at once as the workflow orders them: round k is
    suggested from round k - W's history, with the first passes of rounds k - W + 1 .. k - 1 replaying.
    Which rounds a suggest sees is fixed by the round number, so replaying each round at once here
    gives the trials a sweep gives. Returns the last history and each round's passes."""
    window = context.config.sweep.rounds_in_flight
    histories: list[BranchHistory] = []
    passes: list[list[RoundSuggestions]] = []
    for k in range(context.config.sweep.max_rounds):
        told = histories[k - window] if k >= window else None
        in_flight = [p[0] for p in passes[max(0, k - window + 1) : k]]
        previous = histories[-1] if histories else None
        history, round_passes = run_round(context, spec, pool, k, previous, store, replay, told, in_flight)
        histories.append(history)
        passes.append(round_passes)
    return histories[-1], passes
