"""A static estimate of a layout under the sweep's workload: aiconfigurator's per-step model, no replay.

The replay scores a candidate by simulating every request with aiconfigurator's per-step timings.
This estimate reads the same timings (the prefill of one prompt, one decode step at a batch) and
solves for a steady state instead: queueing for the prefills, a fixed point for the decode batch.
It costs microseconds per layout once an engine is compiled. It only ranks a branch's pool for the
warm start (search/warm_start.py); it never scores a candidate.
"""

from __future__ import annotations

import logging
import math
from typing import Any, Literal, NamedTuple

from pydantic import BaseModel, ConfigDict

from spica_lib.config import OptimizationGoal, OptimizationTarget, Workload
from spica_lib.config.trace import scan_trace
from spica_lib.facts.parallel import DisaggConfig, ParallelConfig, ParallelShape, ReplicaConfig

Role = Literal["agg", "prefill", "decode"]
UTILISATION_LIMIT = 0.95  # prefill utilisation above which a queue is taken to grow without bound
DECODE_ITERATIONS = 40


class Traffic(BaseModel):
    """What the estimate needs of a workload: mean lengths and an open-loop rate or a closed-loop cap."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    isl: int
    osl: int
    rate: float | None = None  # requests per second, open loop
    concurrency: int | None = None  # requests in flight, closed loop


def traffic_of(workload: Workload) -> Traffic | None:
    """The workload's traffic, or None when it depends on the candidate (a kv_load_ratio workload)."""
    if workload.kv_load_ratio is not None:
        return None
    if workload.is_trace_based:
        scan = scan_trace(workload.trace_path)
        seconds = scan.duration_ms / 1000.0 / float(workload.arrival_speedup_ratio)
        rate = scan.records / seconds if seconds > 0 else None
        isl = max(1, round(scan.input_tokens / scan.records))
        osl = max(1, round(scan.output_tokens / scan.records))
        return Traffic(isl=isl, osl=osl, rate=rate, concurrency=workload.replay_concurrency)
    rate = float(workload.request_rate) if workload.request_rate else None
    return Traffic(isl=workload.isl, osl=max(1, workload.osl), rate=rate, concurrency=workload.concurrency)


class StepModel:
    """Per-step timings of one (model, hardware), memoised per backend and engine shape."""

    def __init__(self, model_name: str, sku: str, backend_versions: dict[str, str]):
        self.model_name = model_name
        self.sku = sku
        self.backend_versions = backend_versions
        self._engines: dict[tuple[str, ParallelShape], Any] = {}
        self._prefill: dict[tuple[str, ParallelShape, int], float] = {}
        self._decode: dict[tuple[str, ParallelShape, int, int], float] = {}

    def _engine(self, backend: str, shape: ParallelShape) -> Any:
        key = (backend, shape)
        if key not in self._engines:
            from aiconfigurator_core.sdk.engine import EngineHandle

            for name in ("aiconfigurator", "aiconfigurator_core"):  # its perf DB warns of every fallback table
                logging.getLogger(name).setLevel(logging.ERROR)
            moe = shape.moe_tp * shape.moe_ep > 1
            self._engines[key] = EngineHandle.compile(
                self.model_name,
                self.sku,
                backend,
                backend_version=self.backend_versions[backend],
                tp_size=shape.tp,
                attention_dp_size=shape.attention_dp,
                moe_tp_size=shape.moe_tp if moe else None,
                moe_ep_size=shape.moe_ep if moe else None,
            )
        return self._engines[key]

    def prefill_ms(self, backend: str, shape: ParallelShape, isl: int) -> float:
        """One prompt's prefill on one attention-DP rank."""
        key = (backend, shape, isl)
        if key not in self._prefill:
            self._prefill[key] = float(self._engine(backend, shape).predict_prefill_latency(1, isl))
        return self._prefill[key]

    def decode_step_ms(self, backend: str, shape: ParallelShape, batch: float, context: int) -> float:
        """One decode step of the engine with `batch` requests in flight, spread over its DP ranks."""
        per_rank = max(1, math.ceil(batch / shape.attention_dp))
        key = (backend, shape, per_rank, context)
        if key not in self._decode:
            # A two-token output is one prefill-free decode step in aiconfigurator's accounting.
            self._decode[key] = float(self._engine(backend, shape).predict_decode_latency(per_rank, context, 2))
        return self._decode[key]


class EngineLoad(NamedTuple):
    ttft_ms: float
    itl_ms: float
    stable: bool


def engine_load(
    model: StepModel, backend: str, shape: ParallelShape, role: Role, traffic: Traffic, rate: float
) -> EngineLoad:
    """Steady state of one engine fed `rate` requests per second (open loop)."""
    prefill = model.prefill_ms(backend, shape, traffic.isl) if role != "decode" else 0.0
    busy = rate * prefill / 1000.0 / shape.attention_dp  # share of each rank's time spent in prefill
    if busy >= UTILISATION_LIMIT:
        return EngineLoad(math.inf, math.inf, False)
    ttft = prefill + prefill * busy / (2.0 * (1.0 - busy)) if role != "decode" else 0.0  # M/D/1 wait
    if role == "prefill":
        return EngineLoad(ttft, 0.0, True)
    context = traffic.isl + traffic.osl // 2
    itl = model.decode_step_ms(backend, shape, 1, context) / (1.0 - busy)
    for _ in range(DECODE_ITERATIONS):  # Little's law: the batch in decode grows with the step time
        batch = max(1.0, rate * traffic.osl * itl / 1000.0)
        updated = model.decode_step_ms(backend, shape, batch, context) / (1.0 - busy)
        if abs(updated - itl) < 1e-3 * itl:
            break
        itl = updated
    stable = rate * traffic.osl * itl / 1000.0 < 1e5  # a batch that keeps growing never converges
    return EngineLoad(ttft + (itl / 2.0 if role == "agg" else 0.0), itl, stable)


def _max_stable_rate(model: StepModel, backend: str, shape: ParallelShape, role: Role, traffic: Traffic) -> float:
    if role == "decode":
        # Decode alone never saturates by queueing in this model; its rate is bounded by the step time.
        step = model.decode_step_ms(backend, shape, 256 * shape.attention_dp, traffic.isl + traffic.osl // 2)
        return 256 * shape.attention_dp * 1000.0 / (step * traffic.osl)
    prefill = model.prefill_ms(backend, shape, traffic.isl)
    return UTILISATION_LIMIT * 1000.0 * shape.attention_dp / prefill


class LayoutEstimate(BaseModel):
    """The estimate of one (layout, backend) under one traffic."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    layout: str
    backend: str
    gpus: int
    served_rps: float
    ttft_ms: float
    itl_ms: float
    osl: int

    @property
    def e2e_ms(self) -> float:
        return self.ttft_ms + self.itl_ms * max(0, self.osl - 1)

    @property
    def tokens_per_second(self) -> float:
        return self.served_rps * self.osl


def estimate_layout(model: StepModel, config: ParallelConfig, backend: str, traffic: Traffic) -> LayoutEstimate:
    """One deployment under the traffic: round robin over each role's engines."""
    rate = traffic.rate if traffic.rate else _closed_loop_rate(model, config, backend, traffic)
    roles = _roles(config)
    loads = {role: engine_load(model, backend, r.shape, role, traffic, rate / r.replicas) for role, r in roles}
    if all(load.stable for load in loads.values()):
        served, ttft, itl = rate, _ttft(loads), _itl(loads)
    else:
        capacity = min(r.replicas * _max_stable_rate(model, backend, r.shape, role, traffic) for role, r in roles)
        served, ttft, itl = min(rate, capacity), math.inf, math.inf
    return LayoutEstimate(
        layout=config.label(),
        backend=backend,
        gpus=config.total_gpus,
        served_rps=served,
        ttft_ms=ttft,
        itl_ms=itl,
        osl=traffic.osl,
    )


def _roles(config: ParallelConfig) -> list[tuple[Role, ReplicaConfig]]:
    if isinstance(config, DisaggConfig):
        return [("prefill", config.prefill), ("decode", config.decode)]
    return [("agg", config)]


def _ttft(loads: dict[Role, EngineLoad]) -> float:
    return sum(load.ttft_ms for load in loads.values())


def _itl(loads: dict[Role, EngineLoad]) -> float:
    return max(load.itl_ms for load in loads.values())


def _closed_loop_rate(model: StepModel, config: ParallelConfig, backend: str, traffic: Traffic) -> float:
    """The rate at which `concurrency` requests in flight cycle (Little's law), found by bisection."""
    roles = _roles(config)
    capacity = min(r.replicas * _max_stable_rate(model, backend, r.shape, role, traffic) for role, r in roles)
    in_flight = float(traffic.concurrency or 1)
    low, high = 0.0, capacity
    for _ in range(40):
        rate = (low + high) / 2.0
        loads = [engine_load(model, backend, r.shape, role, traffic, rate / r.replicas) for role, r in roles]
        if not all(load.stable for load in loads):
            high = rate
            continue
        cycle = sum(load.ttft_ms for load in loads) + max(load.itl_ms for load in loads) * traffic.osl
        low, high = (rate, high) if rate * cycle / 1000.0 < in_flight else (low, rate)
    return max(low, 1e-9)


def estimated_value(goal: OptimizationGoal, target: OptimizationTarget, estimate: LayoutEstimate) -> float:
    """The estimate of `target` for one layout, signed so that larger is better."""
    tokens = estimate.tokens_per_second
    meets = sla_miss(goal, estimate) <= 1.0
    values = {
        OptimizationTarget.THROUGHPUT: tokens,
        OptimizationTarget.THROUGHPUT_PER_GPU: tokens / estimate.gpus,
        OptimizationTarget.GOODPUT: tokens if meets else 0.0,
        OptimizationTarget.GOODPUT_PER_GPU: tokens / estimate.gpus if meets else 0.0,
        OptimizationTarget.THROUGHPUT_PER_USER: 1000.0 / estimate.itl_ms if estimate.itl_ms > 0 else 0.0,
        OptimizationTarget.E2E_LATENCY: -estimate.e2e_ms,
        OptimizationTarget.COST_PER_MILLION_OUTPUT_TOKENS: -(estimate.gpus / tokens) if tokens > 0 else -math.inf,
    }
    return values[target]


def sla_miss(goal: OptimizationGoal, estimate: LayoutEstimate) -> float:
    """The worst estimated statistic over its SLA bound (1.0 or less meets it); 0.0 without an SLA."""
    if goal.sla is None:
        return 0.0
    bounds = {"ttft_ms": estimate.ttft_ms, "itl_ms": estimate.itl_ms, "e2e_ms": estimate.e2e_ms}
    ratios = [bounds[name] / float(getattr(goal.sla, name)) for name in bounds if getattr(goal.sla, name) is not None]
    return max(ratios, default=0.0)
