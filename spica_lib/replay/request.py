"""Running one deployment plan through NVIDIA Dynamo's offline replay (the mocker).

`ReplayRequest` is everything the replay needs, as plain data; `replay_call` turns it into the
plain-data call that `spica_lib.replay.call` makes, in a child forked by `spica_lib.replay.worker`
(a replay cannot be interrupted from Python, so a time limit needs a process to kill).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from spica_lib.config import SLATarget, Workload
from spica_lib.config.trace import scan_trace
from spica_lib.config.workload import DEFAULT_ARRIVAL_SEED
from spica_lib.replay.plan import DeploymentPlan

TRACE_BLOCK_SIZE = 512  # tokens per Mooncake hash id
# Metrics of the simulator's own speed, not of the deployment: they differ between two replays of one plan.
WALL_CLOCK_METRICS = frozenset({"wall_time_ms", "processed_tokens_per_s", "processed_output_tokens_per_s"})


class ScreenPlan(BaseModel):
    """Replay a prefix of the workload first: the first `requests` (synthetic) or the first `sim_time_ms`
    of simulated time (trace). If the SLA's statistic there is `margin` times a bound, stop there."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    bounds: list[tuple[str, float]]  # (replay metric, bound), e.g. ("p99_ttft_ms", 2000.0)
    margin: float
    fraction: float  # the share of the workload the prefix holds (its share of the time limit, too)
    requests: int | None = None
    sim_time_ms: float | None = None
    prefix: str  # in words, for the trial's reason: "first 48 of 240 requests"


class ScreenOutcome(BaseModel):
    """What the prefix showed (replayed first, or judged inside the one replay): the worst bound's metric,
    value and ratio, and whether it stopped there and why."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    screened: bool
    metric: str
    value: float
    ratio: float  # value / bound (1e6 when the prefix completed no request)
    prefix: str
    replay_seconds: float
    cpu_seconds: float = 0.0  # the prefix's CPU time in its child
    why: str | None = None  # judged inside the replay and stopped: the rule that stopped it (replay/sla_watch.py)


class ReplayRequest(BaseModel):
    """One replay: the plan, the traffic, the closed-loop cap and the SLA used for goodput."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    plan: DeploymentPlan
    workload: Workload
    concurrency: int | None = None  # per-candidate closed-loop cap (kv_load_ratio workloads)
    sla: SLATarget | None = None
    trace_block_size: int = TRACE_BLOCK_SIZE
    benchmark_granularity: int = 8
    screen: ScreenPlan | None = None


class ScalingEvent(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    at_s: float
    component: str
    from_count: int
    to_count: int


class ReplayOutcome(BaseModel):
    """The replay's summary (numeric keys only) and what the planner did."""

    model_config = ConfigDict(extra="forbid")

    metrics: dict[str, float]
    scaling_events: list[ScalingEvent] = Field(default_factory=list)
    replay_seconds: float
    screen: ScreenOutcome | None = (
        None  # with a screen plan: what the prefix showed (metrics are the prefix's if screened)
    )


def _router_and_engines(plan: DeploymentPlan) -> tuple[dict[str, Any], dict[str, Any]]:
    kwargs: dict[str, Any] = {
        "router_mode": plan.router_mode,
        "planner_config": plan.planner_config,
    }
    if plan.deployment_mode == "agg":
        kwargs["num_workers"] = plan.num_workers
        return kwargs, {"extra_engine_args": plan.agg_engine_args}
    kwargs.update(num_prefill_workers=plan.num_prefill_workers, num_decode_workers=plan.num_decode_workers)
    if plan.planner_config is not None and _system(plan.prefill_engine_args) != _system(plan.decode_engine_args):
        # Without it the planner models both roles from the decode engine's GPU (ai-dynamo 1.5.1).
        kwargs["performance_model_metadata"] = {
            "prefill": _performance_model(plan.prefill_engine_args),
            "decode": _performance_model(plan.decode_engine_args),
        }
    return kwargs, {"prefill_engine_args": plan.prefill_engine_args, "decode_engine_args": plan.decode_engine_args}


def _system(args: dict[str, Any] | None) -> str | None:
    return (args or {}).get("aic_system")


def _performance_model(args: dict[str, Any]) -> dict[str, Any]:
    """The planner's aiconfigurator identity of one role's engine (its own GPU type, backend and shape)."""
    config = {
        "backend": args["aic_backend"],
        "backend_version": args["aic_backend_version"],
        "system": args["aic_system"],
        "model_path": args["aic_model_path"],
        "tp_size": args["aic_tp_size"],
        "attention_dp_size": args["aic_attention_dp_size"],
    }
    config.update({key: args[key] for key in ("aic_moe_tp_size", "aic_moe_ep_size", "aic_nextn") if key in args})
    config = {key.removeprefix("aic_"): value for key, value in config.items()}
    return {"provider": "aic", "config": config}


def _load(request: ReplayRequest) -> tuple[str, list[Any], dict[str, Any]]:
    w = request.workload
    if w.is_trace_based:
        kwargs = {
            "arrival_speedup_ratio": w.arrival_speedup_ratio,
            "trace_block_size": request.trace_block_size,
            "replay_concurrency": w.replay_concurrency,
        }
        return "trace", [w.trace_path], kwargs
    kwargs = {
        "turns_per_session": w.turns_per_session,
        "shared_prefix_ratio": w.shared_prefix_ratio,
        "num_prefix_groups": w.num_prefix_groups,
        "inter_turn_delay_ms": w.inter_turn_delay_ms,
    }
    # Open loop: the Poisson sample (workload.arrival_seed). A closed loop draws no arrivals; it is passed the
    # default all the same, so that nothing in the call is left to Dynamo's own choice.
    kwargs["arrival_seed"] = DEFAULT_ARRIVAL_SEED if w.arrival_seed is None else w.arrival_seed
    cap = w.effective_in_flight_cap(request.concurrency)
    if cap is not None:
        kwargs["replay_concurrency"] = cap
    else:
        kwargs["request_rate"] = w.request_rate
    return "synthetic", [w.isl, w.osl, w.resolved_request_count(request.concurrency)], kwargs


def replay_call(request: ReplayRequest) -> dict[str, Any]:
    """The request as one plain-data Dynamo call (see `spica_lib.replay.call`)."""
    function, args, load = _load(request)
    common, engines = _router_and_engines(request.plan)
    kwargs = {**common, "benchmark_granularity": request.benchmark_granularity}
    if request.sla is not None:
        kwargs.update(sla_ttft_ms=request.sla.ttft_ms, sla_itl_ms=request.sla.itl_ms, sla_e2e_ms=request.sla.e2e_ms)
    return {
        "function": function,
        "args": args,
        "kwargs": kwargs,
        "load": load,
        "engines": engines,
        "router_config": request.plan.router_config,
        "screen": _screen(request.screen, function, args),
        "pace": {"requests": _requests(request, args)},  # the worker adds the limit (replay/progress.py)
    }


def _requests(request: ReplayRequest, args: list[Any]) -> int:
    """Requests the full replay serves: a synthetic call's count, or the trace's records."""
    if request.workload.is_trace_based:
        return scan_trace(request.workload.trace_path).records
    return int(args[2])


def _screen(plan: ScreenPlan | None, function: str, args: list[Any]) -> dict[str, Any] | None:
    """The prefix call's changes to the full call (plain data for the child), with the bounds to check and
    the prefix's share of the workload (the worker judges the replay's pace by it: replay/stall.py)."""
    if plan is None:
        return None
    if function == "synthetic":
        change = {"args": [*args[:2], plan.requests]}
    else:
        change = {"kwargs": {"max_sim_time_ms": plan.sim_time_ms}}
    bounds = [list(b) for b in plan.bounds]
    return {**change, "bounds": bounds, "margin": plan.margin, "fraction": plan.fraction, "prefix": plan.prefix}


def run_replay(request: ReplayRequest, per_request_path: str | None = None) -> ReplayOutcome:
    """Run the replay in this process; with `per_request_path`, also write one Parquet row per request.

    Raises whatever Dynamo raises.
    """
    from spica_lib.replay.call import execute_call

    return ReplayOutcome.model_validate(execute_call(replay_call(request), per_request_path))
