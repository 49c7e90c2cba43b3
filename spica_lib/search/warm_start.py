"""The warm start: round 0 of a branch replays a diverse top set of its pool, ranked by the static estimate.

Every (layout, backend) of the pool is estimated under the workload (pools/estimate.py: no replay,
milliseconds per layout) and ranked: first those expected to meet the SLA at the offered load, then
those expected to keep up with it, then the rest (an open loop a deployment cannot keep up with queues
without bound: nearly every request misses the SLA, whatever share of the load it could serve within it),
each by the goal's estimate. Round 0 then takes the best one, and after it the best of each GPU count
and backend not yet taken among the layouts expected to keep up, so that a wrong estimate near the SLA
costs one seed, not the round, and no seed is spent on a layout expected to fall behind while one that
keeps up is left. Knobs take the config's first choice. The seeds are told to the
designer like any suggestion, and it explores from there. It is deterministic: the seed plays no part.
"""

from __future__ import annotations

import json
import math
import time
from typing import Any, NamedTuple

from pydantic import BaseModel, ConfigDict, Field

from spica_lib.config import OptimizationTarget, SmartSearchConfig
from spica_lib.facts.parallel import ParallelConfig
from spica_lib.pools.branches import PoolRecord
from spica_lib.pools.estimate import LayoutEstimate, StepModel, estimate_layout, estimated_value, sla_miss, traffic_of
from spica_lib.search.space import BranchSpace


class WarmStartPick(BaseModel):
    """One seed of round 0 and what the estimate said of it (under the worst workload)."""

    model_config = ConfigDict(extra="forbid")

    layout: str
    backend: str
    gpus: int
    estimate_rank: int  # 1 = the estimate's best in the branch
    target: str
    # None: not finite (a layout whose queue the estimate expects to grow without bound)
    estimated_value: float | None
    estimated_sla_miss: float | None
    estimated_ttft_ms: float | None
    estimated_itl_ms: float | None


class WarmStart(BaseModel):
    """Recorded in round 0's `suggestions.json`: how the seeds were chosen."""

    model_config = ConfigDict(extra="forbid")

    layouts_estimated: int = 0
    estimate_seconds: float = 0.0
    picks: list[WarmStartPick]
    note: str | None = None  # why there are no seeds, when there are none
    # sweep.rounds_in_flight > 1: rounds 1 .. W - 1 start with round 0, before anything is told; round 0
    # estimates once for all of them and leaves them these picks, `target` each, in turn.
    left_for_rounds_in_flight: list[WarmStartPick] = Field(default_factory=list)


class Ranked(NamedTuple):
    config: ParallelConfig
    backend: str
    estimate: LayoutEstimate  # under the workload that binds (the worst)
    keys: dict[str, tuple[float, ...]]  # target -> (meets the SLA, keeps up, value, -SLA miss), larger is better


def rank_pool(config: SmartSearchConfig, pool: list[PoolRecord], model: StepModel) -> list[Ranked]:
    """Every (layout, backend) of the pool with its estimate, in pool order.

    With several workloads the worst one decides, whatever `goal.workload_score` says: the warm start
    needs a rough order, and a layout that fails one workload rarely wins on a weighted mean.
    """
    traffics = [traffic_of(w) for w in (config.workloads or [config.workload])]
    targets = _targets(config)
    out = []
    for record in pool:
        for backend in record.backends:
            kv = record.kv_tokens.get(backend)
            estimates = [estimate_layout(model, record.config, backend, t, config.goal.sla, kv) for t in traffics]
            scored = [(e, {t.value: _key(config, t, e) for t in targets}) for e in estimates]
            keys = {t.value: min(k[t.value] for _, k in scored) for t in targets}
            binding = min(scored, key=lambda pair: pair[1][targets[0].value])[0]
            out.append(Ranked(config=record.config, backend=backend, estimate=binding, keys=keys))
    return out


def _targets(config: SmartSearchConfig) -> list[OptimizationTarget]:
    goal = config.goal
    return list(goal.resolved_pareto_objectives) if goal.is_pareto else [goal.target]


def _key(config: SmartSearchConfig, target: OptimizationTarget, estimate: LayoutEstimate) -> tuple[float, ...]:
    # First the layouts expected to meet the SLA at the offered load (a sweep screens the others out as
    # infeasible), then those expected to keep up with it, then by the target's estimate, then by the margin
    # to the SLA.
    miss = sla_miss(config.goal, estimate)
    keeps_up = 1.0 if estimate.keeps_up else 0.0
    return (1.0 if miss <= 1.0 else 0.0, keeps_up, estimated_value(config.goal, target, estimate), -miss)


def diverse_top(ranked: list[Ranked], count: int, targets: list[str]) -> list[tuple[int, str]]:
    """`count` picks (indices into `ranked`, with the target that chose each): each target in turn takes
    its best not yet picked, preferring a (GPUs, backend) not yet covered among those expected to keep up
    with the load (among all, when none left does)."""
    orders = {t: estimate_order(ranked, t) for t in targets}
    picked: list[int] = []
    covered: set[tuple[int, str]] = set()
    out = []
    for turn in range(min(count, len(ranked))):
        target = targets[turn % len(targets)]
        fresh = [i for i in orders[target] if i not in picked]
        keeping = [i for i in fresh if ranked[i].estimate.keeps_up] or fresh
        new_kind = [i for i in keeping if _kind(ranked[i]) not in covered]
        choice = (new_kind or fresh)[0]
        picked.append(choice)
        covered.add(_kind(ranked[choice]))
        out.append((choice, target))
    return out


def estimate_order(ranked: list[Ranked], target: str) -> list[int]:
    """Indices into `ranked`, the estimate's best first (ties: the earlier in the pool)."""
    return sorted(range(len(ranked)), key=lambda i: (ranked[i].keys[target], -i), reverse=True)


def _kind(item: Ranked) -> tuple[int, str]:
    return (item.config.total_gpus, item.backend)


def seed_parameters(space: BranchSpace, config: ParallelConfig, backend: str) -> dict[str, Any]:
    """Vizier parameters that decode to `config` on `backend`, with every other knob at its first choice."""
    params: dict[str, Any] = {}
    for knob in space.knobs:
        first = backend if knob.name == "backend" else space.spec.knob_choices[knob.name][0]
        if knob.kind == "categorical":
            params[knob.name] = knob.values[list(knob.choices).index(first)]
        else:
            params[knob.name] = float(first)
    for param in space.floats:
        params[param.name] = param.default
    return {**params, **space.layout_parameters(config)}


# The step models of this process, by what they time: compiling aiconfigurator's engines and loading its perf DB
# is most of the estimate's cost. The sweep's warm host fills this before it forks a round-0 suggest
# (run/jobs/search.py: prepare_suggest), so every branch's suggest forks with the engines compiled, once.
_STEP_MODELS: dict[str, StepModel] = {}


def step_model(config: SmartSearchConfig, backend_versions: dict[str, str]) -> StepModel:
    """The (kept) step model of the config's model and GPU type, with its calibration, for these backends."""
    calibration = config.calibration
    scales = {b: (s.prefill, s.decode) for b, s in calibration.scales.items()} if calibration is not None else None
    space = config.search_space
    key = json.dumps([space.model_name, space.hardware_sku, backend_versions, scales], sort_keys=True)
    if key not in _STEP_MODELS:
        _STEP_MODELS[key] = StepModel(space.model_name, space.hardware_sku, backend_versions, scales)
    return _STEP_MODELS[key]


def warm_start(config: SmartSearchConfig, space: BranchSpace, count: int) -> tuple[WarmStart, list[dict[str, Any]]]:
    """Round 0's seeds for the branch and the record of how they were chosen."""
    clock = time.perf_counter()
    model = step_model(config, space.spec.backend_versions)
    try:
        ranked = rank_pool(config, space.pool, model)
    except Exception as exc:  # the designer still has the round: a failed estimate costs the warm start only
        note = f"static estimate failed ({type(exc).__name__}: {exc}); round 0 is the designer's"
        return WarmStart(picks=[], note=note, estimate_seconds=time.perf_counter() - clock), []
    targets = [t.value for t in _targets(config)]
    rank_of = {t: {index: place for place, index in enumerate(estimate_order(ranked, t), start=1)} for t in targets}
    picks, params = [], []
    for index, target in diverse_top(ranked, count, targets):
        item = ranked[index]
        _, _, value, miss = item.keys[target]
        picks.append(
            WarmStartPick(
                layout=item.config.label(),
                backend=item.backend,
                gpus=item.config.total_gpus,
                estimate_rank=rank_of[target][index],
                target=target,
                estimated_value=_finite(value),
                estimated_sla_miss=_finite(-miss),
                estimated_ttft_ms=_finite(item.estimate.ttft_ms),
                estimated_itl_ms=_finite(item.estimate.itl_ms),
            )
        )
        params.append(seed_parameters(space, item.config, item.backend))
    record = WarmStart(layouts_estimated=len(ranked), estimate_seconds=time.perf_counter() - clock, picks=picks)
    return record, params


def share_of_round(
    space: BranchSpace, round_zero: WarmStart, round_index: int, target: int
) -> tuple[WarmStart, list[dict[str, Any]]]:
    """Round `round_index`'s seeds (1 <= it < rounds_in_flight) from the picks round 0 left to it."""
    picks = round_zero.left_for_rounds_in_flight[(round_index - 1) * target : round_index * target]
    layouts = {record.config.label(): record.config for record in space.pool}
    params = [seed_parameters(space, layouts[pick.layout], pick.backend) for pick in picks]
    return WarmStart(layouts_estimated=round_zero.layouts_estimated, picks=picks, note=round_zero.note), params


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None
