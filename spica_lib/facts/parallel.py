"""Parallel layouts: worker shapes, replica configs and disaggregated pairs within a GPU budget.

Pure enumeration (no perf DB, no memory check). A worker shape is (tp, attention_dp, moe_tp,
moe_ep, pp); a replica config is a shape times a replica count; a disaggregated config pairs a
prefill and a decode replica config that share the budget.

MoE shapes are the "pure" patterns every backend can serve: TEP (tensor attention, expert-parallel
FFN), DEP (data-parallel attention, expert-parallel FFN) and MoE-TP (tensor-parallel experts under
tensor or data-parallel attention). Pipeline parallelism is not enumerated: the mocker does not
model it.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_serializer

GPU_LADDER = (1, 2, 4, 8, 16)
Strategy = Literal["tp", "tep", "dep", "dtp", "mixed"]
# sglang MoE kernels that run experts expert-parallel only (no MoE-TP).
SGLANG_EP_ONLY_MOE_BACKENDS = ("deepep_moe", "megamoe")


class ParallelShape(BaseModel):
    """One worker's layout. GPUs per worker = tp x pp x attention_dp."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tp: int = Field(ge=1)
    attention_dp: int = Field(default=1, ge=1)
    moe_tp: int = Field(default=1, ge=1)
    moe_ep: int = Field(default=1, ge=1)
    pp: int = Field(default=1, ge=1)

    @property
    def gpus(self) -> int:
        return self.tp * self.pp * self.attention_dp

    @property
    def is_moe_layout(self) -> bool:
        return self.moe_tp > 1 or self.moe_ep > 1

    @property
    def strategy(self) -> Strategy:
        tp, dp, moe_tp, moe_ep = self.tp, self.attention_dp, self.moe_tp, self.moe_ep
        if moe_tp == 1 and moe_ep == 1:
            return "tp"
        if moe_tp == 1 and moe_ep > 1:
            if tp > 1 and dp == 1:
                return "tep"
            if tp == 1 and dp > 1:
                return "dep"
        if moe_ep == 1 and moe_tp > 1:
            if tp > 1 and dp == 1:
                return "tp"
            if tp == 1 and dp > 1:
                return "dtp"
        return "mixed"

    def sort_key(self) -> tuple[int, ...]:
        return (self.tp, self.pp, self.attention_dp, self.moe_tp, self.moe_ep)

    def label(self) -> str:
        parts = [f"tp{self.tp}"]
        if self.attention_dp > 1:
            parts.append(f"dp{self.attention_dp}")
        if self.moe_tp > 1:
            parts.append(f"moetp{self.moe_tp}")
        if self.moe_ep > 1:
            parts.append(f"ep{self.moe_ep}")
        if self.pp > 1:
            parts.append(f"pp{self.pp}")
        return "".join(parts)


class ReplicaConfig(BaseModel):
    """`replicas` identical workers of one shape (an agg deployment, or one disagg role).

    `sku` names the GPU type when the search space is an inventory of several; with one GPU type it
    is None and left out of the JSON form, so a one-SKU layout hashes as it always did.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    shape: ParallelShape
    replicas: int = Field(default=1, ge=1)
    sku: str | None = None

    @model_serializer(mode="wrap")
    def _without_unset_sku(self, handler: Any) -> dict[str, Any]:
        data = handler(self)
        if self.sku is None:
            data.pop("sku", None)
        return data

    @property
    def total_gpus(self) -> int:
        return self.shape.gpus * self.replicas

    def sort_key(self) -> tuple[Any, ...]:
        return (*self.shape.sort_key(), self.replicas, self.sku or "")

    def label(self) -> str:
        return f"{self.replicas}x{self.shape.label()}" + (f"@{self.sku}" if self.sku else "")


class DisaggConfig(BaseModel):
    """Prefill and decode workers, each role with its own shape and replica count."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    prefill: ReplicaConfig
    decode: ReplicaConfig

    @property
    def total_gpus(self) -> int:
        return self.prefill.total_gpus + self.decode.total_gpus

    def sort_key(self) -> tuple[Any, ...]:
        return (*self.prefill.sort_key(), *self.decode.sort_key())

    def label(self) -> str:
        return f"P {self.prefill.label()} + D {self.decode.label()}"


ParallelConfig = ReplicaConfig | DisaggConfig


def on_sku(config: ParallelConfig, sku: str) -> ParallelConfig:
    """The layout with every role on GPU type `sku`."""
    if isinstance(config, DisaggConfig):
        return DisaggConfig(prefill=on_sku(config.prefill, sku), decode=on_sku(config.decode, sku))
    return config.model_copy(update={"sku": sku})


def role_configs(config: ParallelConfig) -> dict[str, ReplicaConfig]:
    if isinstance(config, DisaggConfig):
        return {"prefill": config.prefill, "decode": config.decode}
    return {"agg": config}


def _powers_of_two_up_to(limit: int) -> list[int]:
    out, value = [], 1
    while value <= limit:
        out.append(value)
        value *= 2
    return out


def _factor_pairs(total: int) -> list[tuple[int, int]]:
    return [(a, total // a) for a in _powers_of_two_up_to(total) if total % a == 0]


def enumerate_worker_shapes(
    gpus: int,
    is_moe: bool,
    backend: str,
    *,
    allow_moe_pure_tp: bool = True,
    moe_backend: str | None = None,
) -> list[ParallelShape]:
    """Every legal worker shape using exactly `gpus` GPUs (pp = 1).

    Ours, not aiconfigurator's `enumerate_parallel_config`: its real-silicon sweep leaves out DTP
    (MoE-TP under data-parallel attention), which the reference enumerates (the 176 / 96 counts).
    """
    if not is_moe:
        return [ParallelShape(tp=gpus)]
    if gpus == 1:
        return []  # a MoE worker needs at least two ranks to split attention or experts
    shapes = []
    for tp, dp in _factor_pairs(gpus):
        for moe_tp, moe_ep in _factor_pairs(tp * dp):
            shape = ParallelShape(tp=tp, attention_dp=dp, moe_tp=moe_tp, moe_ep=moe_ep)
            if _backend_allows(shape, backend, moe_backend) and _is_pure(shape, allow_moe_pure_tp):
                shapes.append(shape)
    return shapes


def _backend_allows(shape: ParallelShape, backend: str, moe_backend: str | None) -> bool:
    if backend == "trtllm" and shape.tp > 1 and shape.attention_dp > 1:
        return False
    if backend == "vllm" and shape.moe_tp > 1 and shape.moe_ep > 1:
        return False
    if backend == "sglang" and moe_backend in SGLANG_EP_ONLY_MOE_BACKENDS and shape.moe_tp > 1:
        return False
    return True


def _is_pure(shape: ParallelShape, allow_moe_pure_tp: bool) -> bool:
    strategy = shape.strategy
    if strategy in ("tep", "dep"):
        return True
    if strategy in ("tp", "dtp") and shape.moe_tp > 1:
        return allow_moe_pure_tp
    return False


def enumerate_parallel_configs(
    gpu_budget: int,
    is_moe: bool,
    backend: str,
    *,
    min_gpu_budget: int | None = None,
    min_gpus_per_worker: int = 1,
    max_gpus_per_worker: int | None = None,
    allow_moe_pure_tp: bool = True,
    moe_backend: str | None = None,
) -> list[ReplicaConfig]:
    """Every (shape, replicas) whose total GPUs lie in [min_gpu_budget, gpu_budget]; workers of at most
    `max_gpus_per_worker` GPUs when given (a node smaller than the system's)."""
    configs = []
    for gpus in GPU_LADDER:
        if not min_gpus_per_worker <= gpus <= min(gpu_budget, max_gpus_per_worker or gpu_budget):
            continue
        shapes = enumerate_worker_shapes(
            gpus, is_moe, backend, allow_moe_pure_tp=allow_moe_pure_tp, moe_backend=moe_backend
        )
        for shape in shapes:
            for replicas in range(1, gpu_budget // gpus + 1):
                if min_gpu_budget is None or gpus * replicas >= min_gpu_budget:
                    configs.append(ReplicaConfig(shape=shape, replicas=replicas))
    return configs


def enumerate_disagg_configs(
    gpu_budget: int,
    is_moe: bool,
    backend: str,
    *,
    min_gpu_budget: int | None = None,
    max_gpus_per_worker: int | None = None,
    allow_moe_pure_tp: bool = True,
    moe_backend: str | None = None,
) -> list[DisaggConfig]:
    """Every prefill x decode pair whose combined GPUs lie in [min_gpu_budget, gpu_budget]."""
    roles = enumerate_parallel_configs(
        gpu_budget, is_moe, backend, max_gpus_per_worker=max_gpus_per_worker, allow_moe_pure_tp=allow_moe_pure_tp,
        moe_backend=moe_backend,
    )  # fmt: skip
    if not roles:
        return []
    # The other role needs at least the smallest role config, so no role may take more than the rest.
    room = gpu_budget - min(config.total_gpus for config in roles)
    roles = [config for config in roles if config.total_gpus <= room]
    pairs = []
    for prefill in roles:
        for decode in roles:
            total = prefill.total_gpus + decode.total_gpus
            if total <= gpu_budget and (min_gpu_budget is None or total >= min_gpu_budget):
                pairs.append(DisaggConfig(prefill=prefill, decode=decode))
    return pairs


def enumerate_inventory_configs(
    inventory: dict[str, int],
    mode: str,
    is_moe: bool,
    backend: str,
    *,
    min_gpu_budget: int | None = None,
    allow_moe_pure_tp: bool = True,
    moe_backend: str | None = None,
) -> list[ParallelConfig]:
    """Every layout an inventory of several GPU types (SKU -> GPUs) can hold, each role tagged with its SKU.

    Agg runs on one SKU. Disagg takes a prefill SKU and a decode SKU independently: each role
    within its SKU's count, and both within that count when they share it. `min_gpu_budget`
    bounds the layout's total GPUs from below, whatever their types.
    """
    options = dict(is_moe=is_moe, backend=backend, allow_moe_pure_tp=allow_moe_pure_tp, moe_backend=moe_backend)
    roles = {
        sku: [config.model_copy(update={"sku": sku}) for config in enumerate_parallel_configs(count, **options)]
        for sku, count in inventory.items()
    }
    low = min_gpu_budget or 0
    if mode == "agg":
        return [config for configs in roles.values() for config in configs if config.total_gpus >= low]
    pairs = []
    for prefill_sku, prefills in roles.items():
        for decode_sku, decodes in roles.items():
            shared = inventory[prefill_sku] if prefill_sku == decode_sku else None
            for prefill in prefills:
                for decode in decodes:
                    total = prefill.total_gpus + decode.total_gpus
                    if total >= low and (shared is None or total <= shared):
                        pairs.append(DisaggConfig(prefill=prefill, decode=decode))
    return pairs


def parse_pinned_config(entry: dict[str, Any], mode: str) -> ParallelConfig:
    """A `parallel_configs` entry (already schema-checked) as a typed config."""
    if mode == "disagg":
        return DisaggConfig(prefill=_replica_from(entry["prefill"]), decode=_replica_from(entry["decode"]))
    return _replica_from(entry)


def _replica_from(entry: dict[str, Any]) -> ReplicaConfig:
    shape_keys = {k: v for k, v in entry.items() if k != "replicas"}
    return ReplicaConfig(shape=ParallelShape(**shape_keys), replicas=entry.get("replicas", 1))
