"""KV-load: turn a `kv_load_ratio` into a closed-loop concurrency for one candidate.

The ratio is relative to the KV cache the replay actually simulates for the candidate, so a load
of 0.8 is 80 % of that cache and load pressure compares across layouts: capacity = the mocker's
KV blocks per rank x block size x attention-DP ranks x replicas of the load role (decode in
disagg), divided by the average tokens a request keeps in the cache (isl + osl/2). TP and EP
ranks share one KV cache, so they do not multiply it.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from spica_lib.config import Workload
from spica_lib.facts.kv_capacity import KvEstimator, KvSettings
from spica_lib.facts.parallel import DisaggConfig, ParallelConfig, role_configs


class InfeasibleKVCapacity(ValueError):
    """The candidate cannot hold its load in KV cache (or has no KV cache at all)."""


class KVLoadResolution(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    ratio: float
    concurrency: int
    concurrency_capacity: int
    role_capacity_tokens: dict[str, int]
    load_role: str


def role_kv_settings(sample: dict[str, Any], role: str) -> KvSettings:
    """The settings the replay sizes a role's cache with (it ignores batch size and MTP depth there)."""
    return KvSettings(
        max_num_tokens=int(sample[f"{role}_max_num_batched_tokens"]),
        memory_fraction=float(sample[f"{role}_gpu_memory_utilization"]),
    )


def resolve_kv_load(
    sample: dict[str, Any],
    workload: Workload,
    parallel_config: ParallelConfig,
    ratio: float,
    estimator: KvEstimator,
) -> KVLoadResolution:
    if workload.isl is None or workload.osl is None:
        raise ValueError("kv_load_ratio needs a synthetic workload with isl and osl")
    backend = sample["backend"]
    capacity: dict[str, int] = {}
    for role, replica in role_configs(parallel_config).items():  # every role, so prefill misfits show too
        block = int(sample[f"{role}_block_size"])
        if block <= 0:
            raise ValueError(f"{role}_block_size must be greater than zero, got {block}")
        settings = role_kv_settings(sample, role)
        on_sku = estimator if replica.sku is None else estimator.on(replica.sku)  # an inventory: the role's GPU
        blocks = on_sku.gpu_blocks(replica.shape, backend, settings, block)
        if blocks.blocks_per_rank is None:
            raise InfeasibleKVCapacity(
                f"no KV budget for backend={backend}, shape={replica.shape.label()}, "
                f"max_num_batched_tokens={settings.max_num_tokens}: {blocks.reason}"
            )
        capacity[role] = blocks.blocks_per_rank * block * replica.shape.attention_dp * replica.replicas
    load_role = "decode" if isinstance(parallel_config, DisaggConfig) else "agg"
    per_request = workload.isl + workload.osl // 2
    if per_request <= 0:
        raise InfeasibleKVCapacity(
            f"kv_load_ratio needs positive average tokens per request, got isl+osl/2={per_request}"
        )
    slots = capacity[load_role] // per_request
    if slots < 1:
        raise InfeasibleKVCapacity(
            f"{load_role} KV capacity {capacity[load_role]} tokens cannot hold the estimated {per_request} tokens "
            "per in-flight request"
        )
    return KVLoadResolution(
        ratio=float(ratio),
        concurrency=max(1, int(ratio * slots)),
        concurrency_capacity=slots,
        role_capacity_tokens=capacity,
        load_role=load_role,
    )
