"""A static estimate of a layout under the sweep's workload: aiconfigurator's per-step model, no replay.

The replay scores a candidate by simulating every request with aiconfigurator's per-step timings.
This estimate reads the same timings (the prefill of one prompt, one decode step at a batch) and
solves for a steady state instead: queueing for the prefills, a fixed point for the decode batch.
It costs microseconds per layout once an engine is compiled. It only ranks a branch's pool for the
warm start (search/warm_start.py); it never scores a candidate.

A decode batch is bounded twice: by the largest `max_num_seqs` in use, and by the requests whose KV cache
fits in the engine (its KV tokens per rank, from the pool, over a request's mean resident context). A
deployment whose decode needs a larger batch than its KV cache holds (with room for the batch's Poisson
swing, one standard deviation) has no steady state: requests wait for KV room and the queue grows (on a 12k-request conversation trace, ISL 11.8k, every layout with one
TP1 decode worker replayed to under 1 % of the best score, which the estimate without this bound ranked
first).
"""

from __future__ import annotations

import logging
import math
from typing import Any, Literal, NamedTuple

from pydantic import BaseModel, ConfigDict

from spica_lib.config import OptimizationGoal, OptimizationTarget, SLATarget, Workload
from spica_lib.traces.scan import scan_trace
from spica_lib.facts.parallel import DisaggConfig, ParallelConfig, ParallelShape, ReplicaConfig

Role = Literal["agg", "prefill", "decode"]
UTILISATION_LIMIT = 0.95  # prefill utilisation above which a queue is taken to grow without bound
DECODE_ITERATIONS = 40
BISECTIONS = 30
DECODE_BATCH_LIMIT = 1024  # requests in decode per attention-DP rank: the largest max_num_seqs in use
KV_UTILISATION_LIMIT = 0.95  # share of a rank's KV tokens the decode batch may fill before it stops growing


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

    def __init__(
        self,
        model_name: str,
        sku: str,
        backend_versions: dict[str, str],
        step_scales: dict[str, tuple[float, float]] | None = None,
        fmha_dtype: str | None = None,
    ):
        self.model_name = model_name
        self.fmha_dtype = fmha_dtype  # the attention precision the perf DB is read at (None: the checkpoint's)
        self.sku = sku
        self.backend_versions = backend_versions
        # backend -> (prefill, decode) multipliers of an opted-in calibration, as the replay applies them
        self.step_scales = step_scales or {}
        self._engines: dict[tuple[str, ParallelShape], Any] = {}
        self._prefill: dict[tuple[str, ParallelShape, int], float] = {}
        self._decode: dict[tuple[str, ParallelShape, int, int], float] = {}
        self._other_skus: dict[str, StepModel] = {}

    def on(self, sku: str | None) -> StepModel:
        """The timings of another GPU type of an inventory (this model for None or its own SKU)."""
        if sku is None or sku == self.sku:
            return self
        if sku not in self._other_skus:
            from spica_lib.facts.catalog import versions_on

            versions = versions_on(sku, self.backend_versions)
            self._other_skus[sku] = StepModel(self.model_name, sku, versions, self.step_scales, self.fmha_dtype)
        return self._other_skus[sku]

    def _engine(self, backend: str, shape: ParallelShape) -> Any:
        key = (backend, shape)
        if key not in self._engines:
            from aiconfigurator_core.sdk.engine import EngineHandle

            for name in ("aiconfigurator", "aiconfigurator_core"):  # its perf DB warns of every fallback table
                logging.getLogger(name).setLevel(logging.ERROR)
            moe = shape.moe_tp * shape.moe_ep > 1
            quant = {"fmha_quant_mode": self.fmha_dtype} if self.fmha_dtype else {}
            self._engines[key] = EngineHandle.compile(
                self.model_name,
                self.sku,
                backend,
                backend_version=self.backend_versions[backend],
                tp_size=shape.tp,
                attention_dp_size=shape.attention_dp,
                moe_tp_size=shape.moe_tp if moe else None,
                moe_ep_size=shape.moe_ep if moe else None,
                **quant,
            )
        return self._engines[key]

    def prefill_ms(self, backend: str, shape: ParallelShape, isl: int) -> float:
        """One prompt's prefill on one attention-DP rank."""
        key = (backend, shape, isl)
        if key not in self._prefill:
            scale = self.step_scales.get(backend, (1.0, 1.0))[0]
            self._prefill[key] = scale * float(self._engine(backend, shape).predict_prefill_latency(1, isl))
        return self._prefill[key]

    def decode_step_ms(self, backend: str, shape: ParallelShape, batch: float, context: int) -> float:
        """One decode step of the engine with `batch` requests in flight, spread over its DP ranks."""
        per_rank = max(1, math.ceil(batch / shape.attention_dp))
        key = (backend, shape, per_rank, context)
        if key not in self._decode:
            # A two-token output is one prefill-free decode step in aiconfigurator's accounting.
            scale = self.step_scales.get(backend, (1.0, 1.0))[1]
            self._decode[key] = scale * float(self._engine(backend, shape).predict_decode_latency(per_rank, context, 2))
        return self._decode[key]


class EngineLoad(NamedTuple):
    ttft_ms: float
    itl_ms: float
    stable: bool


def batch_limit(shape: ParallelShape, traffic: Traffic, kv_tokens: int | None) -> float:
    """The most requests one engine can hold in decode: `max_num_seqs` at most, and (with `kv_tokens` per rank)
    as many as its KV cache holds at a request's mean resident context (its prompt and half its output)."""
    limit = float(DECODE_BATCH_LIMIT)
    if kv_tokens:
        limit = min(limit, KV_UTILISATION_LIMIT * kv_tokens / (traffic.isl + traffic.osl / 2.0))
    return limit * shape.attention_dp


def engine_load(
    model: StepModel,
    backend: str,
    shape: ParallelShape,
    role: Role,
    traffic: Traffic,
    rate: float,
    kv_tokens: int | None = None,
) -> EngineLoad:
    """Steady state of one engine fed `rate` requests per second (open loop); `kv_tokens` per rank bound its
    decode batch (None: only `max_num_seqs` does)."""
    prefill = model.prefill_ms(backend, shape, traffic.isl) if role != "decode" else 0.0
    busy = rate * prefill / 1000.0 / shape.attention_dp  # share of each rank's time spent in prefill
    if busy >= UTILISATION_LIMIT:
        return EngineLoad(math.inf, math.inf, False)
    ttft = prefill + prefill * busy / (2.0 * (1.0 - busy)) if role != "decode" else 0.0  # M/D/1 wait
    if role == "prefill":
        return EngineLoad(ttft, 0.0, True)
    context = traffic.isl + traffic.osl // 2
    largest = batch_limit(shape, traffic, kv_tokens)
    itl = model.decode_step_ms(backend, shape, 1, context) / (1.0 - busy)
    for _ in range(DECODE_ITERATIONS):  # Little's law: the batch in decode grows with the step time
        batch = max(1.0, rate * traffic.osl * itl / 1000.0)
        # The requests in decode are about Poisson around that mean (many arrivals, each staying a while): room
        # for the mean plus one standard deviation, or the batch often finds no seat or no KV room and queues.
        if batch + math.sqrt(batch) > largest:
            return EngineLoad(math.inf, math.inf, False)
        updated = model.decode_step_ms(backend, shape, batch, context) / (1.0 - busy)
        if abs(updated - itl) < 1e-3 * itl:
            break
        itl = updated
    return EngineLoad(ttft + (itl / 2.0 if role == "agg" else 0.0), itl, True)


class LayoutEstimate(BaseModel):
    """The estimate of one (layout, backend) under one traffic."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    layout: str
    backend: str
    gpus: int
    gpus_by_sku: dict[str, int] = {}  # what a per-SKU price charges
    offered_rps: float
    served_rps: float  # what the deployment keeps up with: the offered rate, or its capacity below that
    sla_rps: float  # the most it serves within the SLA (the served rate when there is no SLA)
    ttft_ms: float  # at the offered rate (infinite when the deployment cannot keep up)
    itl_ms: float
    osl: int

    @property
    def keeps_up(self) -> bool:
        """Whether it keeps up with the offered rate (an open loop it cannot keep up with queues without bound)."""
        return math.isfinite(self.ttft_ms)

    @property
    def e2e_ms(self) -> float:
        return self.ttft_ms + self.itl_ms * max(0, self.osl - 1)


class DeploymentLoad(NamedTuple):
    ttft_ms: float
    itl_ms: float
    stable: bool


KvTokens = dict[str, int]  # role -> KV tokens per rank of its engines (a pool record's, for one backend)


def deployment_load(
    model: StepModel, config: ParallelConfig, backend: str, traffic: Traffic, rate: float, kv: KvTokens | None = None
) -> DeploymentLoad:
    """The deployment fed `rate` requests per second, spread round robin over each role's engines."""
    kv = kv or {}
    loads = [
        engine_load(model.on(r.sku), backend, r.shape, role, traffic, rate / r.replicas, kv.get(role))
        for role, r in _roles(config)
    ]
    if not all(load.stable for load in loads):
        return DeploymentLoad(math.inf, math.inf, False)
    return DeploymentLoad(sum(load.ttft_ms for load in loads), max(load.itl_ms for load in loads), True)


def estimate_layout(
    model: StepModel,
    config: ParallelConfig,
    backend: str,
    traffic: Traffic,
    sla: SLATarget | None = None,
    kv: KvTokens | None = None,
) -> LayoutEstimate:
    """One deployment under the traffic: what it serves, what it serves within the SLA, its latencies. `kv`: its
    roles' KV tokens per rank (the pool's), which bound their decode batches (None: only max_num_seqs does)."""
    capacity = _highest_rate(model, config, backend, traffic, lambda load: True, kv)
    rate = traffic.rate if traffic.rate else _closed_loop_rate(model, config, backend, traffic, capacity, kv)
    at_rate = deployment_load(model, config, backend, traffic, rate, kv)
    served = rate if at_rate.stable else min(rate, capacity)
    within = served
    if sla is not None:
        within = min(
            rate, _highest_rate(model, config, backend, traffic, lambda load: _miss(sla, load, traffic.osl) <= 1, kv)
        )
    return LayoutEstimate(
        layout=config.label(),
        backend=backend,
        gpus=config.total_gpus,
        gpus_by_sku=_gpus_by_sku(model, config),
        offered_rps=rate,
        served_rps=served,
        sla_rps=within,
        ttft_ms=at_rate.ttft_ms,
        itl_ms=at_rate.itl_ms,
        osl=traffic.osl,
    )


def _highest_rate(
    model: StepModel, config: ParallelConfig, backend: str, traffic: Traffic, accept: Any, kv: KvTokens | None
) -> float:
    """The highest deployment rate that is stable and accepted, by bisection (0 when none is)."""
    roles, kv = _roles(config), kv or {}
    ceiling = min(
        r.replicas * _rate_ceiling(model.on(r.sku), backend, r.shape, role, traffic, kv.get(role)) for role, r in roles
    )
    low, high = 0.0, ceiling
    for _ in range(BISECTIONS):
        rate = (low + high) / 2.0
        load = deployment_load(model, config, backend, traffic, rate, kv)
        low, high = (rate, high) if load.stable and accept(load) else (low, rate)
    return low


def _rate_ceiling(
    model: StepModel, backend: str, shape: ParallelShape, role: Role, traffic: Traffic, kv_tokens: int | None
) -> float:
    """Requests per second one engine of `role` can take at most: its prefills' share of time, or for a
    decode engine its largest batch."""
    if role == "decode":
        batch = batch_limit(shape, traffic, kv_tokens)
        step = model.decode_step_ms(backend, shape, batch, traffic.isl + traffic.osl // 2)
        return batch * 1000.0 / (step * traffic.osl)
    return UTILISATION_LIMIT * 1000.0 * shape.attention_dp / model.prefill_ms(backend, shape, traffic.isl)


def _gpus_by_sku(model: StepModel, config: ParallelConfig) -> dict[str, int]:
    out: dict[str, int] = {}
    for _, replica in _roles(config):
        sku = replica.sku or model.sku
        out[sku] = out.get(sku, 0) + replica.total_gpus
    return out


def _roles(config: ParallelConfig) -> list[tuple[Role, ReplicaConfig]]:
    if isinstance(config, DisaggConfig):
        return [("prefill", config.prefill), ("decode", config.decode)]
    return [("agg", config)]


def _closed_loop_rate(
    model: StepModel, config: ParallelConfig, backend: str, traffic: Traffic, capacity: float, kv: KvTokens | None
) -> float:
    """The rate at which `concurrency` requests in flight cycle (Little's law), found by bisection."""
    in_flight = float(traffic.concurrency or 1)
    low, high = 0.0, capacity
    for _ in range(BISECTIONS):
        rate = (low + high) / 2.0
        load = deployment_load(model, config, backend, traffic, rate, kv)
        cycle = load.ttft_ms + load.itl_ms * traffic.osl
        low, high = (rate, high) if load.stable and rate * cycle / 1000.0 < in_flight else (low, rate)
    return max(low, 1e-9)


def _miss(sla: SLATarget, load: DeploymentLoad, osl: int) -> float:
    values = {"ttft_ms": load.ttft_ms, "itl_ms": load.itl_ms, "e2e_ms": load.ttft_ms + load.itl_ms * max(0, osl - 1)}
    return max(
        (values[name] / float(getattr(sla, name)) for name in values if getattr(sla, name) is not None), default=0.0
    )


def estimated_value(goal: OptimizationGoal, target: OptimizationTarget, estimate: LayoutEstimate) -> float:
    """The estimate of `target` for one layout, signed so that larger is better.

    Goodput counts what is served within the SLA, so an overloaded deployment still ranks by how
    much of the traffic it keeps within the bounds rather than all tying at zero.
    """
    served, within, gpus = estimate.served_rps * estimate.osl, estimate.sla_rps * estimate.osl, estimate.gpus
    values = {
        OptimizationTarget.THROUGHPUT: served,
        OptimizationTarget.THROUGHPUT_PER_GPU: served / gpus,
        OptimizationTarget.GOODPUT: within,
        OptimizationTarget.GOODPUT_PER_GPU: within / gpus,
        OptimizationTarget.THROUGHPUT_PER_USER: 1000.0 / estimate.itl_ms if estimate.itl_ms > 0 else 0.0,
        OptimizationTarget.E2E_LATENCY: -estimate.e2e_ms,
        OptimizationTarget.COST_PER_MILLION_OUTPUT_TOKENS: -(_hourly_usd(goal, estimate) / served)
        if served > 0
        else -math.inf,
    }
    return values[target]


def _hourly_usd(goal: OptimizationGoal, estimate: LayoutEstimate) -> float:
    """The deployment's price per hour (its GPU count when no price is known: the order is the same)."""
    prices = {sku: goal.gpu_hour_price(sku) for sku in estimate.gpus_by_sku}
    if not estimate.gpus_by_sku or any(price is None for price in prices.values()):
        return float(estimate.gpus)
    return sum(prices[sku] * gpus for sku, gpus in estimate.gpus_by_sku.items())


def sla_miss(goal: OptimizationGoal, estimate: LayoutEstimate) -> float:
    """The worst estimated statistic over its SLA bound at the offered rate (1.0 or less meets it); 0.0 without an SLA."""
    if goal.sla is None:
        return 0.0
    load = DeploymentLoad(estimate.ttft_ms, estimate.itl_ms, math.isfinite(estimate.ttft_ms))
    return _miss(goal.sla, load, estimate.osl)
