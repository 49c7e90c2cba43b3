"""A branch's rounds driven in one process, for benchmarks and tests: the same suggest -> replay ->
refill -> tell sequence the workflow runs as Snakemake jobs, with a caller-given replay."""

from __future__ import annotations

from collections.abc import Callable

from spica_lib.pools.branches import BranchSpec, PoolRecord
from spica_lib.search.history import BranchHistory, RoundSuggestions
from spica_lib.search.rounds import SearchContext, refill_round, replacements_needed, suggest_round, tell_round
from spica_lib.trial.spec import TrialRecord, TrialResult, TrialSpec

Replay = Callable[[TrialSpec], TrialResult]


def run_round(
    context: SearchContext,
    spec: BranchSpec,
    pool: list[PoolRecord],
    round_index: int,
    history: BranchHistory | None,
    store: dict[str, TrialRecord],
    replay: Replay,
) -> tuple[BranchHistory, list[RoundSuggestions]]:
    """One round of one branch; new trials are added to `store` (key -> record)."""

    def results() -> dict[str, TrialResult]:
        return {key: record.result for key, record in store.items()}

    suggestions, specs = suggest_round(context, spec, pool, round_index, history, results())
    passes = [suggestions]
    while True:
        for trial in specs:
            store[trial.key()] = TrialRecord(key=trial.key(), spec=trial, result=replay(trial))
        if not replacements_needed(passes, results()):
            break
        refill, specs = refill_round(context, spec, pool, history, passes, results())
        passes.append(refill)
        if not specs:
            break
    return tell_round(context.config.goal, passes, results(), history), passes
