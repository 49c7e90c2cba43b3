"""The sequential finish: fresh samples where they can still change the recommendation, and no more.

The finish starts with `sweep.finish_samples` fresh samples for each finished deployment. After
each look it asks results/confidence.py what the samples show. It stops as soon as the
recommendation is decided (and its level known, see below): every deployment still in contention
is shown behind the best or within the margin of it, or, if not, would not be preferred to the
recommendation were it shown within the margin (more GPUs, more cost). Otherwise the deployments not yet shown behind — all of them,
since their comparisons are paired and one left at fewer samples keeps the others' intervals wide —
get the next look's samples. The looks double (4, 8, 16 by default) up to
`sweep.finish_max_samples`; their number L is fixed before the first one, and every interval is
made at level alpha / L per look so that stopping at any of them keeps the family's 95 %.

Exact replays (round robin on traffic that does not change) give intervals of one point and
decide at the first look; so do repeats whose spread is negligible against the gaps.

A decided finish also gives the recommendation alone more samples while its statistic has a
standard error above PRECISION of itself: the level it reports is the one a fleet is sized by.
Those samples pair with no other deployment's, so they change no comparison: results/confidence.py
compares deployments only on the samples they share, and says what happened on the others.

When the statistic cannot support a claim even at `sweep.finish_max_samples` (a tail statistic
needs more samples than that for a distribution-free bound, results/pair_bounds.py), more samples
cannot decide anything: the finish stops after its first look, but for the recommendation's precision.

The statistic reported after a stop is the plain statistic of all the samples a deployment got
(the sample mean, by default), with its bootstrap standard error. Stopping depends on the data,
so it is not exactly unbiased; bench/robust_answers.py measures its error against 40 later samples.
"""

from __future__ import annotations

from collections.abc import Callable

from spica_lib.config import SmartSearchConfig
from spica_lib.config.finish_settings import rare_event_share
from spica_lib.results.confidence import FinishVerdict, judge
from spica_lib.results.finish import FinishResult, finished, sample_kind, sample_specs
from spica_lib.results.rare_events import samples_to_see
from spica_lib.trial.spec import TrialResult, TrialSpec

Replayer = Callable[[dict[str, TrialSpec]], dict[str, TrialResult]]


def looks(first: int, most: int) -> list[int]:
    """Samples per deployment at each look: `first`, doubling, up to `most` (the last look)."""
    planned = [first]
    while planned[-1] < most:
        planned.append(min(most, 2 * planned[-1]))
    return planned


# The reported statistic's standard error the finish draws samples for, as a share of the statistic: with it, the
# reported level is within 3 % of the deployment's true one in 9 of 10 finishes (1.645 x 1.5 % = 2.5 %, and the
# rest for the stop's own bias; bench/robust_answers.py measures both).
PRECISION = 0.015


def precise(verdict: FinishVerdict) -> bool:
    """Whether the recommendation's statistic is known to PRECISION (exact replays: always)."""
    first = verdict.recommended
    if first is None or first.statistic is None:
        return True
    return first.se is not None and first.se <= PRECISION * abs(first.statistic)


def next_counts(finish: FinishResult, verdict: FinishVerdict) -> dict[str, int]:
    """The samples each deployment should have after the next look ({}: stop here)."""
    counts = {d.key: len(d.samples) for d in finish.deployments}
    settled = verdict.decided or not can_claim(finish, verdict)
    if not settled:
        # The bounds' looks (up to sweep.finish_max_samples) go to every deployment in contention while a bound
        # could still change the answer; the rare-event check's samples only to the deployments an equivalence
        # would favour and those they are compared with, past the cap if it must (FinishResult.rare_look).
        if set(verdict.open_keys) - set(verdict.rare_keys):
            look = _next_look(finish.looks, counts, verdict.contender_keys)
            if look is not None:
                return {key: look for key in verdict.contender_keys}
        rare_looks = [*finish.looks, *([finish.rare_look] if finish.rare_look is not None else [])]
        look = _next_look(rare_looks, counts, verdict.rare_keys)
        return {key: look for key in verdict.rare_keys} if look is not None else {}
    if precise(verdict):
        return {}
    # Settled but imprecise: only the recommendation's level is wanted; its new samples pair with nothing, so no
    # comparison changes (they are left out of every pair), only its statistic and standard error.
    key = verdict.recommended.key
    look = _next_look(finish.looks, counts, [key])
    return {key: look} if look is not None else {}


def most_finish_replays(config: SmartSearchConfig) -> int:
    """The finish's trial replays at most (for its job's time limit): every finished deployment at the cap, or at the
    rare-event check's look where that is past it."""
    sweep, share = config.sweep, rare_event_share(config)
    most = max(sweep.finish_max_samples or 0, samples_to_see(share) if share is not None else 0)
    return (sweep.finish_top or 0) * most if sweep.finish_max_samples else 0


def _next_look(looks: list[int], counts: dict[str, int], keys: list[str]) -> int | None:
    """The first planned look past the most samples any of `keys` has (None: no such look, or no keys)."""
    if not keys:
        return None
    current = max(counts[key] for key in keys)
    return next((n for n in looks if n > current), None)


def can_claim(finish: FinishResult, verdict: FinishVerdict) -> bool:
    """Whether the finish's most samples are enough for its statistic to support a claim at the family's level."""
    needed = verdict.samples_for_a_claim
    return needed is not None and needed <= (finish.looks[-1] if finish.looks else 0)


def stop_reason(finish: FinishResult, verdict: FinishVerdict) -> str:
    low, high = finish.samples_used
    first = verdict.recommended
    error = (
        f"; the recommendation's standard error {100 * first.se / abs(first.statistic):.1f} %"
        if first is not None and first.se is not None and first.statistic
        else ""
    )
    behind = f" (deployments shown behind stopped at {low})" if low < high else ""
    if verdict.decided and precise(verdict):
        return f"decided after {high} sample(s){behind}{error}"
    if not verdict.decided and not can_claim(finish, verdict):
        needs = (
            f"a claim about the {finish.robustness} needs {verdict.samples_for_a_claim} paired samples, more than "
            f"sweep.finish_max_samples ({finish.looks[-1] if finish.looks else 0})"
            if verdict.samples_for_a_claim
            else f"the {finish.robustness} statistic supports no claim"
        )
        return f"no claim possible after {high} sample(s): {needs}{behind}{error}"
    cap = f"sweep.finish_max_samples ({finish.looks[-1] if finish.looks else high})"
    if verdict.decided:
        return f"decided; reached {cap} before the statistic's precision{behind}{error}"
    if finish.rare_look is not None and high >= finish.rare_look:
        cap += f" and the rare-event check's {finish.rare_look} (goal.rare_event_share)"
    return f"reached {cap} with {len(verdict.open_keys)} deployment(s) undecided{error}"


def run_finish(config: SmartSearchConfig, top: dict[str, tuple[TrialSpec, TrialResult]], replay: Replayer) -> FinishResult:
    """The sequential finish of the top deployments (key -> spec and search result, in ranking order); `replay`
    replays a batch of finish replays ("<key>#<i>" -> spec) and returns their results by the same names."""
    sweep = config.sweep
    kind = sample_kind(config)
    # A finish's sample counts are the config's (config/root.py fills both); with none (kind None) they are unset,
    # and every deployment gets no sample.
    planned = looks(sweep.finish_samples, sweep.finish_max_samples) if kind is not None else [0]
    specs = {key: spec for key, (spec, _) in top.items()}
    counts = {key: 0 for key in top}
    replays: dict[str, tuple[TrialSpec, TrialResult]] = {}
    wanted = {key: planned[0] for key in top}
    while True:
        batch = sample_specs(specs, kind, {key: range(counts[key], n) for key, n in wanted.items()})
        results = replay(batch)
        replays.update({name: (spec, results[name]) for name, spec in batch.items()})
        counts.update(wanted)
        finish = finished(config, top, replays, counts, planned)
        verdict = judge(finish)
        wanted = next_counts(finish, verdict)
        if not wanted:
            return finish.model_copy(update={"stopped": stop_reason(finish, verdict)})
