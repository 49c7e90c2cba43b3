"""Stage `branches`: one branch per deployment mode, each with its candidate pool and knob choices.

A branch is what one Vizier study searches: the layouts in its pool (each tagged with the backends
that can run it), the backend as a knob, and the engine, router and planner knobs that matter in
that mode. A backend that cannot run one mode (TRT-LLM disaggregation, say) is left out of that
mode with its reason. A listed mode or backend that runs nowhere would be a setting that does
nothing, so it is an error naming the mode or backend and why; so are illegal pinned layouts.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from spica_lib.config import SmartSearchConfig
from spica_lib.config.fields import ROLES
from spica_lib.facts.catalog import resolve_backend_version
from spica_lib.facts.hardware import HardwareFacts, resolve_model_hardware
from spica_lib.facts.kv_capacity import KvEstimator, KvSettings
from spica_lib.facts.parallel import DisaggConfig, ParallelConfig, ReplicaConfig, parse_pinned_config, role_configs
from spica_lib.facts.replay_limits import ReplayLimited, layout_limit, mode_limit
from spica_lib.pools.build import BackendPool, DroppedShape, build_backend_pool, role_settings
from spica_lib.pools.knobs import branch_knob_choices

SCHEMA_VERSION = 1


class NoViableParallelConfig(ValueError):
    """A listed mode or backend has no layout that can run: `problems` holds (field path, why) pairs."""

    def __init__(self, message: str, problems: list[tuple[str, str]] | None = None):
        super().__init__(message)
        self.problems = problems or [("search_space", message)]


class SkippedBackend(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    backend: str
    reason: str


class BranchSpec(BaseModel):
    """Artifact `branches/<mode>/branch.json`: what a branch searches, and what was left out."""

    model_config = ConfigDict(extra="forbid")

    schema_version: int = SCHEMA_VERSION
    deployment_mode: Literal["agg", "disagg"]
    status: Literal["ready", "skipped"]
    skip_reason: str | None = None
    backends: list[str]
    backend_versions: dict[str, str]
    skipped_backends: list[SkippedBackend]
    knob_choices: dict[str, list[Any]]
    float_ranges: dict[str, tuple[float, float]]
    gpu_budget: int
    min_gpu_budget: int | None
    max_seq_len: int
    kv_settings: dict[str, KvSettings]
    pinned: bool
    pool_size: int
    pool_size_by_backend: dict[str, int]
    dropped_shapes: list[DroppedShape]
    replay_limited: list[ReplayLimited] = Field(default_factory=list)  # layouts the replay cannot run, per reason
    hardware: HardwareFacts | None


class PoolRecord(BaseModel):
    """One row of `pool.parquet`: a layout, the backends that run it, and KV tokens per rank per role."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    config: ReplicaConfig | DisaggConfig
    backends: list[str]
    kv_tokens: dict[str, dict[str, int]]  # backend -> role -> tokens per rank


class Branch(BaseModel):
    """A branch in memory: its spec and its pool."""

    model_config = ConfigDict(extra="forbid")

    spec: BranchSpec
    pool: list[PoolRecord]


def enumerate_branches(config: SmartSearchConfig, policies: list[Any] | None = None) -> list[Branch]:
    """Every mode's branch, in config order. Raises NoViableParallelConfig when nothing can run."""
    space = config.search_space
    versions = {backend: resolve_backend_version(space.hardware_sku, backend) for backend in space.backend}
    usable = [b for b, v in versions.items() if v]
    if not usable:
        raise NoViableParallelConfig(
            f"no perf database on {space.hardware_sku} for any of {space.backend}; change search_space.backend or hardware_sku"
        )
    facts = resolve_model_hardware(space.model_name, space.hardware_sku, usable[0], versions[usable[0]])
    max_seq_len = space.context_limit(facts.model.max_context)
    estimator = KvEstimator(space.model_name, space.hardware_sku, versions)
    branches = [
        _branch(config, mode, versions, facts, estimator, max_seq_len, policies)
        for mode in dict.fromkeys(space.deployment_mode)
    ]
    _refuse_settings_that_run_nowhere(config, branches)
    return branches


def _refuse_settings_that_run_nowhere(config: SmartSearchConfig, branches: list[Branch]) -> None:
    space = config.search_space
    why = {(b.spec.deployment_mode, s.backend): s.reason for b in branches for s in b.spec.skipped_backends}
    problems = [
        ("search_space.deployment_mode", f"{mode!r} has no viable layout: " + _reasons(why, mode=mode))
        for mode in (b.spec.deployment_mode for b in branches if b.spec.status == "skipped")
    ]
    problems += _skus_that_run_nowhere(config, branches)
    running = {backend for b in branches for backend in b.spec.backends}
    problems += [
        ("search_space.backend", f"{backend!r} has no viable layout in any listed mode: " + _reasons(why, backend))
        for backend in dict.fromkeys(space.backend)
        if backend not in running
    ]
    if problems:
        where, field = (
            (f"hardware {space.hardware}", "hardware")
            if space.has_gpu_inventory
            else (space.hardware_sku, "gpu_budget")
        )
        head = (
            f"{space.model_name} on {where} cannot run every listed mode and backend; raise "
            f"search_space.{field}, lower context_length, or remove what cannot run"
        )
        lines = [head] + [f"  {path}: {message}" for path, message in problems]
        raise NoViableParallelConfig("\n".join(lines), problems)


def _skus_that_run_nowhere(config: SmartSearchConfig, branches: list[Branch]) -> list[tuple[str, str]]:
    """An inventory's GPU type that no layout of any branch uses would change nothing searched."""
    space = config.search_space
    if not space.has_gpu_inventory:
        return []
    used = {replica.sku for b in branches for record in b.pool for replica in role_configs(record.config).values()}
    dropped = {d.shape.rpartition("@")[2]: d for b in branches for d in b.spec.dropped_shapes}
    problems = []
    for sku, count in space.inventory().items():
        if sku in used:
            continue
        why = f"; e.g. {dropped[sku].shape}: {dropped[sku].reason}" if sku in dropped else ""
        problems.append(
            ("search_space.hardware", f"no listed mode and backend has a viable layout on {count} x {sku}{why}")
        )
    return problems


def _reasons(why: dict[tuple[str, str], str], backend: str | None = None, mode: str | None = None) -> str:
    return "; ".join(
        f"{m}/{b}: {reason}" for (m, b), reason in why.items() if backend in (None, b) and mode in (None, m)
    )


def _branch(
    config: SmartSearchConfig,
    mode: str,
    versions: dict[str, str | None],
    facts: HardwareFacts,
    estimator: KvEstimator,
    max_seq_len: int,
    policies: list[Any] | None,
) -> Branch:
    space = config.search_space
    pins = [parse_pinned_config(entry, mode) for entry in space.parallel_configs] or None
    pools: list[BackendPool] = []
    skipped: list[SkippedBackend] = []
    for backend in dict.fromkeys(space.backend):
        reason = _unusable_backend(mode, backend, versions)
        if reason:
            skipped.append(SkippedBackend(backend=backend, reason=reason))
            continue
        pool = build_backend_pool(space, mode, backend, facts.model, estimator, max_seq_len)
        if not pool.entries:
            skipped.append(
                SkippedBackend(backend=backend, reason=_empty_pool_reason(_budget(space), pool, max_seq_len))
            )
        pools.append(pool)
    if pins is not None:
        _check_pins(mode, pins, pools, skipped)
    records = _merge(pools, pins)
    knobs = branch_knob_choices(space, mode, policies)
    backends = [pool.backend for pool in pools if any(pool.backend in r.backends for r in records)]
    knobs["backend"] = backends
    float_ranges: dict[str, tuple[float, float]] = {}
    if config.workload.kv_load_ratio_range is not None:
        float_ranges["kv_load_ratio"] = config.workload.kv_load_ratio_range
    elif config.workload.kv_load_ratio is not None:
        knobs["kv_load_ratio"] = [float(config.workload.kv_load_ratio)]
    status = "ready" if records else "skipped"
    skip_reason = None
    if not records:
        skip_reason = (
            "no configured backend has a viable parallel config ("
            + "; ".join(f"{s.backend}: {s.reason}" for s in skipped)
            + ")"
        )
    spec = BranchSpec(
        deployment_mode=mode,
        status=status,
        skip_reason=skip_reason,
        backends=backends,
        backend_versions={b: v for b, v in versions.items() if v},
        skipped_backends=skipped,
        knob_choices=knobs,
        float_ranges=float_ranges,
        gpu_budget=space.gpu_budget,
        min_gpu_budget=space.min_gpu_budget,
        max_seq_len=max_seq_len,
        kv_settings={role: role_settings(space, role) for role in ROLES[mode]},
        pinned=pins is not None,
        pool_size=len(records),
        pool_size_by_backend={b: sum(b in r.backends for r in records) for b in backends},
        dropped_shapes=[d for pool in pools for d in pool.dropped],
        replay_limited=[limited for pool in pools for limited in pool.replay_limited],
        hardware=facts,
    )
    return Branch(spec=spec, pool=records)


def _unusable_backend(mode: str, backend: str, versions: dict[str, str | None]) -> str | None:
    limit = mode_limit(mode, backend)
    if limit:
        return limit
    if not versions.get(backend):
        return "no aiconfigurator perf database for this backend on the hardware_sku"
    return None


def _budget(space: Any) -> str:
    return f"hardware={space.hardware}" if space.has_gpu_inventory else f"gpu_budget={space.gpu_budget}"


def _empty_pool_reason(budget: str, pool: BackendPool, max_seq_len: int) -> str:
    if pool.enumerated == 0:
        return f"no legal {pool.mode} layout fits in {budget} (a MoE worker needs at least 2 GPUs)"
    if sum(limited.layouts for limited in pool.replay_limited) == pool.enumerated:
        return "every layout uses " + "; ".join(limited.reason for limited in pool.replay_limited)
    largest = max(pool.dropped, key=lambda d: d.gpus)
    return (
        f"no layout within {budget} holds a {max_seq_len}-token sequence; "
        f"the largest worker {largest.shape} ({largest.gpus} GPUs): {largest.reason}"
    )


def _merge(pools: list[BackendPool], pins: list[ParallelConfig] | None) -> list[PoolRecord]:
    """One record per layout, in first-seen order, with every backend that can run it."""
    backends: dict[ParallelConfig, list[str]] = {}
    tokens: dict[ParallelConfig, dict[str, dict[str, int]]] = {}
    for pool in pools:
        for entry in pool.entries:
            backends.setdefault(entry.config, []).append(pool.backend)
            tokens.setdefault(entry.config, {})[pool.backend] = entry.kv_tokens
    order = pins if pins is not None else list(backends)
    return [
        PoolRecord(config=config, backends=backends[config], kv_tokens=tokens[config])
        for config in dict.fromkeys(order)
        if config in backends
    ]


def _check_pins(mode: str, pins: list[ParallelConfig], pools: list[BackendPool], skipped: list[SkippedBackend]) -> None:
    legal = {entry.config for pool in pools for entry in pool.entries}
    if not legal:
        why = "; ".join(f"{s.backend}: {s.reason}" for s in skipped) or "no backend configured"
        raise NoViableParallelConfig(
            f"deployment_mode={mode!r}: no configured backend can run the pinned parallel_configs ({why})"
        )
    unreplayable = {pin.label(): layout_limit(pin) for pin in pins if layout_limit(pin)}
    if unreplayable:
        raise NoViableParallelConfig(
            f"pinned parallel_configs {list(unreplayable)} cannot be replayed: they use "
            + "; ".join(dict.fromkeys(unreplayable.values()))
            + "; remove them"
        )
    illegal = [pin.label() for pin in pins if pin not in legal]
    if illegal:
        raise NoViableParallelConfig(
            f"pinned parallel_configs {illegal} are not legal and KV-feasible for any configured backend "
            "(shape not enumerable for this model, over gpu_budget, or KV cache too small); "
            "remove them or change search_space.backend / gpu_budget"
        )
