"""Running one deployment plan through NVIDIA Dynamo's offline replay (the mocker).

`ReplayRequest` is everything the replay needs, as plain data; `run_replay` turns it into Dynamo
calls and returns the report as plain data. It runs inside the child process started by
`spica_lib.trial` (a replay cannot be interrupted from Python, so a time limit needs a process to
kill). Dynamo is imported only here, and only when a replay runs.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from spica_lib.config import SLATarget, Workload
from spica_lib.deployment import DeploymentPlan

TRACE_BLOCK_SIZE = 512  # tokens per Mooncake hash id


class ReplayRequest(BaseModel):
    """One replay: the plan, the traffic, the closed-loop cap and the SLA used for goodput."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    plan: DeploymentPlan
    workload: Workload
    concurrency: int | None = None  # per-candidate closed-loop cap (kv_load_ratio workloads)
    sla: SLATarget | None = None
    arrival_seed: int = 42
    trace_block_size: int = TRACE_BLOCK_SIZE
    benchmark_granularity: int = 8


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


def _engine(args: dict[str, Any] | None) -> Any:
    from dynamo.mocker import MockEngineArgs

    return None if args is None else MockEngineArgs(**args)


def _common_kwargs(request: ReplayRequest) -> dict[str, Any]:
    from dynamo.llm import KvRouterConfig

    plan = request.plan
    kwargs: dict[str, Any] = {
        "router_mode": plan.router_mode,
        "router_config": KvRouterConfig(**plan.router_config) if plan.router_config is not None else None,
        "planner_config": plan.planner_config,
        "benchmark_granularity": request.benchmark_granularity,
        "capture_per_request": False,
    }
    if plan.deployment_mode == "agg":
        kwargs.update(extra_engine_args=_engine(plan.agg_engine_args), num_workers=plan.num_workers)
    else:
        kwargs.update(
            prefill_engine_args=_engine(plan.prefill_engine_args),
            decode_engine_args=_engine(plan.decode_engine_args),
            num_prefill_workers=plan.num_prefill_workers,
            num_decode_workers=plan.num_decode_workers,
        )
    if request.sla is not None:
        kwargs.update(sla_ttft_ms=request.sla.ttft_ms, sla_itl_ms=request.sla.itl_ms, sla_e2e_ms=request.sla.e2e_ms)
    return kwargs


def _load_kwargs(request: ReplayRequest) -> dict[str, Any]:
    w = request.workload
    if w.is_trace_based:
        return {
            "arrival_speedup_ratio": w.arrival_speedup_ratio,
            "trace_block_size": request.trace_block_size,
            "replay_concurrency": w.replay_concurrency,
        }
    kwargs: dict[str, Any] = {
        "request_count": w.resolved_request_count(request.concurrency),
        "turns_per_session": w.turns_per_session,
        "shared_prefix_ratio": w.shared_prefix_ratio,
        "num_prefix_groups": w.num_prefix_groups,
        "inter_turn_delay_ms": w.inter_turn_delay_ms,
        "arrival_seed": request.arrival_seed,
    }
    cap = w.effective_in_flight_cap(request.concurrency)
    if cap is not None:
        kwargs["replay_concurrency"] = cap
    else:
        kwargs["request_rate"] = w.request_rate
    return kwargs


def run_replay(request: ReplayRequest, per_request_path: str | None = None) -> ReplayOutcome:
    """Run the replay in this process; with `per_request_path`, also write one Parquet row per request.

    Raises whatever Dynamo raises.
    """
    os.environ.setdefault("DYN_LOG", "error")
    from dynamo.replay import run_synthetic_trace_replay, run_trace_replay

    kwargs = {**_common_kwargs(request), **_load_kwargs(request)}
    kwargs["capture_per_request"] = per_request_path is not None
    started = time.perf_counter()
    if request.workload.is_trace_based:
        report = run_trace_replay(request.workload.trace_path, **kwargs)
    else:
        w = request.workload
        report = run_synthetic_trace_replay(w.isl, w.osl, kwargs.pop("request_count"), **kwargs)
    seconds = time.perf_counter() - started
    if per_request_path is not None:
        _write_per_request(report, per_request_path)
    return _outcome(report, seconds)


def _write_per_request(report: Any, path: str) -> None:
    import pandas as pd

    # Nested per-request histories (routing, admissions) become JSON text columns.
    rows = [{k: (v if not isinstance(v, list | dict) else json.dumps(v)) for k, v in r.items()} for r in report.per_request]
    temp = f"{path}.tmp"
    pd.DataFrame(rows).to_parquet(temp, index=False)
    os.replace(temp, path)


def _outcome(report: Any, seconds: float) -> ReplayOutcome:
    summary = dict(report.summary) if hasattr(report, "summary") else dict(report)
    metrics = {k: float(v) for k, v in summary.items() if isinstance(v, int | float) and not isinstance(v, bool)}
    planner = getattr(report, "planner", None)
    events: list[ScalingEvent] = []
    if planner is not None:
        metrics["planner_total_ticks"] = float(getattr(planner, "total_ticks", 0) or 0)
        events = [
            ScalingEvent(at_s=e.at_s, component=str(e.component), from_count=e.from_count, to_count=e.to_count)
            for e in getattr(planner, "scaling_events", []) or []
        ]
    return ReplayOutcome(metrics=metrics, scaling_events=events, replay_seconds=seconds)
