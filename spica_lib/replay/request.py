"""Running one deployment plan through NVIDIA Dynamo's offline replay (the mocker).

`ReplayRequest` is everything the replay needs, as plain data; `replay_call` turns it into the
plain-data call that `spica_lib.replay.call` makes, in a child forked by `spica_lib.replay.worker`
(a replay cannot be interrupted from Python, so a time limit needs a process to kill).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_serializer

from spica_lib.base.since import without_defaults
from spica_lib.config import SLATarget, Workload
from spica_lib.traces.scan import scan_trace, trace_arrivals, trace_output_lengths
from spica_lib.config.workload import DEFAULT_ARRIVAL_SEED
from spica_lib.replay.plan import DeploymentPlan
from spica_lib.replay.sla_adjust import SlaAdjustment, replayed_bound, replayed_sla

TRACE_BLOCK_SIZE = 512  # tokens per Mooncake hash id
# Metrics of the simulator's own speed, not of the deployment: they differ between two replays of one plan.
WALL_CLOCK_METRICS = frozenset({"wall_time_ms", "processed_tokens_per_s", "processed_output_tokens_per_s"})


class ScreenPlan(BaseModel):
    """The early stops a replay is watched for (replay/early_stop.py): the SLA's bounds, with the percentile
    or coverage floor that makes them hard; and the pace checkpoint, the first `requests` requests (the
    prefix's share of the work, `fraction`), whose CPU time paces the rest of the replay (a time limit)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    bounds: list[tuple[str, float]]  # (replay metric, bound), e.g. ("p99_ttft_ms", 2000.0)
    percentile: float | None = None  # goal.sla.percentile: the bounds are a hard constraint on it
    coverage: float | None = None  # goal.sla_coverage: the least share of requests that must meet every bound
    fraction: float  # the prefix's share of the workload's requests (its share of the time limit, too)
    requests: int | None = None  # the prefix's requests: the pace checkpoint (None: no checkpoint)
    prefix: str  # in words, for the trial's reason: "first 48 of 240 requests"


class PaceCheckpoint(BaseModel):
    """Where the replay's prefix of the work ended: its requests completed, the simulated time, the time taken.
    The worker gives the rest of the replay a CPU budget from it (replay/stall.py)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    prefix: str
    completed: int
    at_sim_ms: float
    replay_seconds: float
    cpu_seconds: float = 0.0  # the prefix's CPU time in its child


class EarlyStop(BaseModel):
    """Why and where a replay was stopped early, on a bound that holds whatever the rest does
    (replay/early_stop.py). What it covered is here, under names that say it is partial."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    rule: Literal["percentile", "coverage", "prune"]
    metric: str | None = None  # the SLA metric whose certain misses decided (a prune may have none)
    bound_ms: float | None = None
    at_sim_ms: float  # simulated time of the tick that decided
    requests: int  # requests of the whole workload
    certain_misses: int  # requests certainly over `metric`'s bound by then
    limit: float | None = None  # percentile: misses that put the percentile over; coverage: misses allowed
    score_bound: float | None = None  # prune: the most the score could still reach ...
    below: float | None = None  # ... and the sweep's k-th best score told before the round, which it cannot reach
    rank: int | None = None  # ... that k
    why: str
    partial_metrics: dict[str, float] = Field(default_factory=dict)  # over the requests completed by then
    replay_seconds: float = 0.0
    cpu_seconds: float = 0.0


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
    # What the replay cannot simulate, added where it is judged (replay/sla_adjust.py): None for most trials.
    adjust: SlaAdjustment | None = None

    @model_serializer(mode="wrap")
    def _without_unset_adjust(self, handler: Any) -> dict[str, Any]:
        # A trial without an adjustment keeps the key it had before adjustments existed.
        return without_defaults(handler(self), self, adjust=None)

    @property
    def judged_sla(self) -> SLATarget | None:
        """The SLA the replay judges each request by (the overhead and the safety margin applied)."""
        return replayed_sla(self.sla, self.adjust)


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
    checkpoint: PaceCheckpoint | None = None  # the pace checkpoint, when the replay reached it
    stop: EarlyStop | None = None  # stopped early on a sound bound (metrics then empty: what it covered is here)


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


def replay_call(request: ReplayRequest, prune: dict[str, Any] | None = None) -> dict[str, Any]:
    """The request as one plain-data Dynamo call (see `spica_lib.replay.call`).

    `prune` ({"below", "rank", "gpus"}): stop once the goodput score (per `gpus` GPUs) certainly stays
    below `below` (replay/early_stop.py). It is the round's, not the trial's: it is not in the trial key.
    """
    function, args, load = _load(request)
    common, engines = _router_and_engines(request.plan)
    kwargs = {**common, "benchmark_granularity": request.benchmark_granularity}
    sla = request.judged_sla
    if sla is not None:
        kwargs.update(sla_ttft_ms=sla.ttft_ms, sla_itl_ms=sla.itl_ms, sla_e2e_ms=sla.e2e_ms)
    return {
        "function": function,
        "args": args,
        "kwargs": kwargs,
        "load": load,
        "engines": engines,
        "router_config": request.plan.router_config,
        "stop": _stop_rules(request, function, args, prune),
        "pace": {"requests": _requests(request, args)},  # the worker adds the limit (replay/progress.py)
    }


def _requests(request: ReplayRequest, args: list[Any]) -> int:
    """Requests the full replay serves: a synthetic call's count, or the trace's records."""
    if request.workload.is_trace_based:
        return scan_trace(request.workload.trace_path).records
    return int(args[2])


def _stop_rules(
    request: ReplayRequest, function: str, args: list[Any], prune: dict[str, Any] | None
) -> dict[str, Any] | None:
    """The early stops' rules for the child (replay/early_stop.py), or None: no screen."""
    plan = request.screen
    if plan is None:
        return None
    rules: dict[str, Any] = {
        "requests": _requests(request, args),
        "bounds": [[metric, replayed_bound(metric, bound, request.adjust)] for metric, bound in plan.bounds],
        "percentile": plan.percentile,
        "coverage": plan.coverage,
        "fraction": plan.fraction,
        "prefix_requests": plan.requests,
        "prefix": plan.prefix,
        "prune": None,
    }
    if prune is not None or plan.coverage is not None:
        rules.update(_deadlines(request, function, args))
        sla = request.judged_sla
        if sla is not None and (sla.ttft_ms is not None or sla.itl_ms is not None):
            # The per-request bounds of Dynamo's goodput, which each completion's TTFT and ITL are judged by.
            rules["sla_ms"] = {"ttft": sla.ttft_ms, "itl": sla.itl_ms}
    if prune is not None:
        workload = request.workload
        if function == "synthetic":
            traffic = {"output_tokens": int(args[1]) * int(args[2]), "osl": int(args[1]), "span_ms": 0.0}
        else:
            scan = scan_trace(workload.trace_path)
            traffic = {
                "output_tokens": scan.output_tokens,
                "output_lengths": list(trace_output_lengths(workload.trace_path)),
                # A closed loop's arrivals follow its completions, not the trace's clock.
                "span_ms": 0.0 if workload.replay_concurrency else scan.duration_ms / workload.arrival_speedup_ratio,
            }
        rules["prune"] = {**prune, **traffic}
    return rules


def _deadlines(request: ReplayRequest, function: str, args: list[Any]) -> dict[str, Any]:
    """When each request must be done to count as meeting the SLA (replay/early_stop.py, "late"), or {}.

    A request meets a ttft_ms + itl_ms SLA only with TTFT <= ttft_ms and (e2e - TTFT) / (n - 1) <= itl_ms
    (Dynamo's goodput), so only if it is done ttft_ms + (n - 1) itl_ms after its arrival. On a trace's own
    clock each request's deadline is known in advance ("deadlines_ms", sorted); a synthetic workload's
    requests all ask for the same length, and a closed loop's arrivals follow its completions, so there
    one deadline after arrival holds for all ("deadline_ms": the longest request's)."""
    sla = request.judged_sla
    if sla is None or sla.ttft_ms is None or sla.itl_ms is None:
        return {}
    ttft, itl = float(sla.ttft_ms), float(sla.itl_ms)
    workload = request.workload
    if function == "synthetic":
        return {"deadline_ms": ttft + max(0, int(args[1]) - 1) * itl}
    if workload.replay_concurrency:
        return {"deadline_ms": ttft + max(0, trace_output_lengths(workload.trace_path)[-1] - 1) * itl}
    speedup = float(workload.arrival_speedup_ratio)
    due = sorted((at / speedup + ttft + max(0, n - 1) * itl, n) for at, n in trace_arrivals(workload.trace_path))
    # Each deadline's output tokens beside it: the tokens that can still count as goodput after a time.
    return {"deadlines_ms": [at for at, _ in due], "deadline_tokens": [n for _, n in due]}


def run_replay(request: ReplayRequest, per_request_path: str | None = None) -> ReplayOutcome:
    """Run the replay in this process; with `per_request_path`, also write one Parquet row per request.

    Raises whatever Dynamo raises.
    """
    from spica_lib.replay.call import execute_call

    return ReplayOutcome.model_validate(execute_call(replay_call(request), per_request_path))
