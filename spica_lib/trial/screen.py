"""The early stops a trial's replay is watched for, and the prefix of work its pace is judged by.

With a goal.sla, a replay is stopped early only on bounds that hold whatever the
rest of the traffic does (replay/early_stop.py): a hard constraint (goal.sla.percentile, or a
goal.sla_coverage floor) once it is certain to miss, and a goodput target once its score can no
longer reach the sweep's k-th best told before its round (the bar comes from the round, search/rounds.py). The prefix is
not a verdict: it is the first `sweep.screen_fraction` of the workload's requests, counted in
requests (a trace's records in arrival order, whatever their spread in time), and only its pace
matters: its CPU time sets the budget of the rest of the replay (replay/stall.py), a time limit
recorded as `timed_out`. Too short a prefix says nothing of the pace: under `MIN_SCREEN_REQUESTS`
requests there is no checkpoint (the bounds still apply).
"""

from __future__ import annotations

import math
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from spica_lib.config import OptimizationGoal, OptimizationTarget, SmartSearchConfig, Workload
from spica_lib.traces.scan import scan_trace
from spica_lib.replay.request import ReplayRequest, ScreenPlan

MIN_SCREEN_REQUESTS = 40
PRUNE_RANK = 5  # a trial is pruned only below the k-th best, k at least this (and at least the finish's top)


class PruneBar(BaseModel):
    """The score a round's trials must be able to reach not to be pruned: the `rank`-th best feasible score
    of the sweep's histories as told before the round was suggested (search/rounds.py `prune_bar`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    below: float
    rank: int
    told: dict[str, int] = Field(default_factory=dict)  # branch -> the last of its rounds the bar counts


def prune_rank(config: SmartSearchConfig) -> int:
    """k: a pruned trial cannot rank in the top k, which holds the finish's top and the deployment files'."""
    sweep = config.sweep
    return max(PRUNE_RANK, sweep.finish_top or 0, sweep.top_k)


def prune_rules(goal: OptimizationGoal, request: ReplayRequest, used_gpus: int, bar: PruneBar | None) -> dict | None:
    """The replay call's prune ({"below", "rank", "gpus"}) for a goodput target, or None: no bar, another
    target (only a goodput score has a bound the ticks can give), or no screen.

    Per GPU, the bound divides by the fewest GPU-seconds the deployment can hold: all its GPUs over the
    duration without a planner; with one, what it held so far (`worker_gpus`: GPUs per worker of each role,
    counted from the replay's ticks) and one worker of each role for the rest (a planner never scales a role
    below one worker, and min_endpoint only raises that floor), so the bound stays optimistic whatever the
    planner does next."""
    if bar is None or request.screen is None or goal.is_pareto or not goal.target.needs_sla:
        return None
    prune: dict[str, Any] = {"below": bar.below, "rank": bar.rank, "gpus": 1}
    planner = request.plan.planner_config
    if goal.target is OptimizationTarget.GOODPUT_PER_GPU:
        prune["gpus"] = used_gpus if planner is None else fewest_planner_gpus(planner)
        if planner is not None:
            prune["worker_gpus"] = {role: int(planner.get(f"{role}_engine_num_gpu") or 0) for role in ("prefill", "decode")}
    return prune


def fewest_planner_gpus(planner_config: dict[str, Any]) -> int:
    """The GPUs of one worker of each role the planner scales (replay/plan.py names each role's)."""
    return sum(int(planner_config.get(key) or 0) for key in ("prefill_engine_num_gpu", "decode_engine_num_gpu")) or 1


def screen_plan(
    config: SmartSearchConfig, concurrency: int | None, workload: Workload | None = None
) -> ScreenPlan | None:
    """The early stops for `workload` (default: the config's), or None (no SLA, or the screen turned off)."""
    goal, sweep, workload = config.goal, config.sweep, workload or config.workload
    if goal.sla is None or sweep.screen_fraction is None:
        return None
    total = scan_trace(workload.trace_path).records if workload.is_trace_based else None
    total = total if total is not None else workload.resolved_request_count(concurrency)
    requests = math.ceil(sweep.screen_fraction * total)
    checkpoint = MIN_SCREEN_REQUESTS <= requests < total
    return ScreenPlan(
        bounds=goal.sla.bounds(),
        percentile=goal.sla.percentile,
        coverage=goal.sla_coverage,
        fraction=requests / total if checkpoint else sweep.screen_fraction,
        requests=requests if checkpoint else None,
        prefix=f"first {requests} of {total} requests" if checkpoint else f"all {total} requests (no checkpoint)",
    )
