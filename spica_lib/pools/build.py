"""Candidate pools: for one deployment mode and backend, the legal layouts the replay can run and whose KV cache fits.

Layouts the pinned replay refuses (facts/replay_limits.py) are counted with their reason and left out
first. A layout is then kept when every role's worker shape (agg; or prefill and decode) can be built for the
model and leaves enough memory for a KV cache holding one full-length sequence. The KV check uses
each role's own settings: its pinned memory fraction and its smallest batched-token choice, so a
layout is in the pool when at least one searched setting can run it. KV tokens per rank are kept
for every role; later stages size concurrency and engines from them.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from spica_lib.config import SearchSpace
from spica_lib.config.fields import ROLES
from spica_lib.config.knobs import role_field, role_knobs
from spica_lib.facts.hardware import ModelFacts, shape_problem, system_facts
from spica_lib.facts.kv_capacity import KvEstimator, KvSettings
from spica_lib.facts.parallel import (
    DisaggConfig,
    ParallelConfig,
    ParallelShape,
    ReplicaConfig,
    enumerate_disagg_configs,
    enumerate_inventory_configs,
    enumerate_parallel_configs,
    role_configs,
)
from spica_lib.facts.replay_limits import ReplayLimited, split_replayable


class DroppedShape(BaseModel):
    """A worker shape left out of a pool, and why."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    backend: str
    role: str
    shape: str
    gpus: int
    reason: str


class PoolEntry(BaseModel):
    """One layout a backend can run, with the KV tokens per rank of each role."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    config: ReplicaConfig | DisaggConfig
    kv_tokens: dict[str, int]


class BackendPool(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    mode: str
    backend: str
    backend_version: str
    entries: list[PoolEntry]
    dropped: list[DroppedShape]
    enumerated: int
    replay_limited: list[ReplayLimited] = Field(default_factory=list)  # left out before the KV check


def role_settings(space: SearchSpace, role: str) -> KvSettings:
    """KV settings of one role: its pinned memory fraction, its smallest batched-token choice and its fewest MTP draft
    tokens (a role without drafts of its own, 0), each the knob table's field of the role (config/knobs.py)."""
    value = {knob.name: getattr(space, role_field(role, knob.name)) for knob in role_knobs(role)}
    return KvSettings(
        max_num_tokens=min(value["max_num_batched_tokens"]),
        memory_fraction=float(value["gpu_memory_utilization"]),
        nextn=min(value.get("nextn", [0])),
    )


def enumerate_mode(space: SearchSpace, mode: str, backend: str, is_moe: bool) -> list[ParallelConfig]:
    if mode in ("agg", "disagg") and space.has_gpu_inventory:
        inventory, low = space.inventory(), space.min_gpu_budget
        return enumerate_inventory_configs(inventory, mode, is_moe, backend, min_gpu_budget=low)
    bounds = {"min_gpu_budget": space.min_gpu_budget, "max_gpus_per_worker": worker_gpu_cap(space)}
    if mode == "agg":
        return list(enumerate_parallel_configs(space.gpu_budget, is_moe, backend, **bounds))
    if mode == "disagg":
        return list(enumerate_disagg_configs(space.gpu_budget, is_moe, backend, **bounds))
    raise ValueError(f"deployment_mode must be 'agg' or 'disagg', got {mode!r}")


def worker_gpu_cap(space: SearchSpace) -> int | None:
    """A node smaller than the system's (`gpus_per_node`) holds a whole worker: the perf DB times a worker's
    collectives within one of the system's nodes, which a worker spanning the smaller nodes would not be."""
    if space.gpus_per_node is None or space.gpus_per_node >= system_facts(space.hardware_sku).gpus_per_node:
        return None
    return space.gpus_per_node


def build_backend_pool(
    space: SearchSpace,
    mode: str,
    backend: str,
    model: ModelFacts,
    estimator: KvEstimator,
    max_seq_len: int,
    configs: list[ParallelConfig] | None = None,
) -> BackendPool:
    """The replayable, KV-feasible subset of `configs` (default: every enumerated layout) for one backend."""
    configs = enumerate_mode(space, mode, backend, model.is_moe) if configs is None else configs
    enumerated = len(configs)
    configs, replay_limited = split_replayable(configs, backend)
    settings = {role: role_settings(space, role) for role in ROLES[mode]}
    verdicts: dict[tuple[str, ParallelShape, str | None], int | str] = {}
    dropped: list[DroppedShape] = []
    for config in configs:  # first-seen order: one estimate per distinct (role, shape, GPU type)
        for role, replica in role_configs(config).items():
            key = (role, replica.shape, replica.sku)
            if key in verdicts:
                continue
            on_sku = estimator.on(replica.sku)
            verdicts[key] = _verdict(replica.shape, backend, settings[role], model, on_sku, max_seq_len)
            if isinstance(verdicts[key], str):
                dropped.append(
                    DroppedShape(
                        backend=backend,
                        role=role,
                        shape=replica.shape.label() + (f"@{replica.sku}" if replica.sku else ""),
                        gpus=replica.shape.gpus,
                        reason=verdicts[key],
                    )
                )
    entries = []
    for config in configs:
        tokens = {role: verdicts[(role, r.shape, r.sku)] for role, r in role_configs(config).items()}
        if all(isinstance(value, int) for value in tokens.values()):
            entries.append(PoolEntry(config=config, kv_tokens=tokens))
    return BackendPool(
        mode=mode,
        backend=backend,
        backend_version=estimator.version(backend),
        entries=entries,
        dropped=dropped,
        enumerated=enumerated,
        replay_limited=replay_limited,
    )


def _verdict(
    shape: ParallelShape,
    backend: str,
    settings: KvSettings,
    model: ModelFacts,
    estimator: KvEstimator,
    max_seq_len: int,
) -> int | str:
    """KV tokens per rank when the shape is usable, otherwise the reason it is not."""
    problem = shape_problem(shape, model)
    if problem:
        return problem
    estimate = estimator.estimate(shape, backend, settings)
    if estimate.tokens_per_rank is None:
        return f"does not fit in GPU memory ({estimate.reason})"
    if estimate.tokens_per_rank < max_seq_len:
        return f"KV cache holds {estimate.tokens_per_rank} tokens per rank, less than one {max_seq_len}-token sequence"
    return estimate.tokens_per_rank
