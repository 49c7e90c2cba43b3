"""Facts about the model and the GPU system, read from aiconfigurator (no network).

Model: MoE or dense, attention type, maximum context, head and expert counts, weight bytes.
System: GPUs per node and memory per GPU. These decide which worker shapes are legal and how
large a worker must be to hold the weights and a full-length sequence.
"""

from __future__ import annotations

import functools
import logging
from typing import Any

from pydantic import BaseModel, ConfigDict

from spica_lib.facts.catalog import supported_databases
from spica_lib.facts.kv_capacity import MEMORY_FRACTION_KIND
from spica_lib.facts.parallel import ParallelShape

# Large enough for any model's weights on one rank: lets the estimator report the full weight size.
_UNBOUNDED_GPU_BYTES = 1 << 50


class UnknownHardware(ValueError):
    """The SKU has no aiconfigurator system description or perf data."""


class ModelFacts(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    model_name: str
    architecture: str
    is_moe: bool
    uses_mla: bool  # multi-head latent attention (DeepSeek-style): KV is not split by tp
    max_context: int
    num_heads: int
    num_kv_heads: int
    num_experts: int
    weight_bytes: int


class SystemFacts(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    hardware_sku: str
    gpus_per_node: int
    vram_bytes: int


class HardwareFacts(BaseModel):
    """Model x system, plus what follows from the pair."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model: ModelFacts
    system: SystemFacts


@functools.cache
def system_facts(sku: str) -> SystemFacts:
    from aiconfigurator_core.sdk import perf_database

    if sku not in supported_databases():
        raise UnknownHardware(
            f"unknown hardware_sku {sku!r}: aiconfigurator has no perf data for it; known: {sorted(supported_databases())}"
        )
    spec = perf_database.load_system_spec(sku)
    return SystemFacts(
        hardware_sku=sku,
        gpus_per_node=int(spec["node"]["num_gpus_per_node"]),
        vram_bytes=int(spec["gpu"]["mem_capacity"]),
    )


@functools.cache
def model_facts(model_name: str, sku: str, backend: str, backend_version: str) -> ModelFacts:
    """Facts of one model; weight bytes come from the estimator on (sku, backend) with no memory cap."""
    from aiconfigurator_core.sdk.models.helpers import check_is_moe
    from aiconfigurator_core.sdk.utils import get_model_config_from_model_path

    info = get_model_config_from_model_path(model_name)
    raw = _raw_config(info)
    return ModelFacts(
        model_name=model_name,
        architecture=str(info["architecture"]),
        is_moe=bool(check_is_moe(model_name, info)),
        uses_mla="kv_lora_rank" in raw,
        max_context=int(info["context"]),
        num_heads=int(info["n"]),
        num_kv_heads=int(info["n_kv"]),
        num_experts=int(info.get("num_experts") or 0),
        weight_bytes=_weight_bytes(model_name, sku, backend, backend_version),
    )


def _raw_config(info: dict[str, Any]) -> dict[str, Any]:
    raw = info.get("raw_config") or {}
    return raw.get("text_config", raw) if isinstance(raw, dict) else {}


def _weight_bytes(model_name: str, sku: str, backend: str, backend_version: str) -> int:
    from aiconfigurator_core.sdk.memory import estimate_kv_cache

    logging.getLogger("aiconfigurator").setLevel(logging.ERROR)
    result = estimate_kv_cache(
        model_name,
        sku,
        backend,
        backend_version,
        max_num_tokens=1,
        max_batch_size=1,
        memory_fraction_kind=MEMORY_FRACTION_KIND[backend],
        memory_fraction_value=1.0,
        gpu_memory_capacity_bytes_override=_UNBOUNDED_GPU_BYTES,
    )
    return int(result["memory_breakdown"]["weights_bytes"])


@functools.cache
def mtp_head_layers(model_name: str) -> int:
    """How many multi-token-prediction layers the model's checkpoint ships (0: none), as aiconfigurator reads its
    config (`resolve_nextn_auto`: DeepSeek-style `num_nextn_predict_layers`, the checkpoint the only source)."""
    from aiconfigurator_core.sdk.config_builders import resolve_nextn_auto

    return int(resolve_nextn_auto(model_name))


def model_features(model_name: str) -> dict[str, str | None]:
    """What some knobs need of a model (config/knobs.py `needs`): each feature, and None where the model has it, else
    why it has not."""
    layers = mtp_head_layers(model_name)
    return {"mtp_head": None if layers else "its config has no MTP layers (num_nextn_predict_layers 0 or absent)"}


def resolve_model_hardware(model_name: str, sku: str, backend: str, backend_version: str) -> HardwareFacts:
    return HardwareFacts(model=model_facts(model_name, sku, backend, backend_version), system=system_facts(sku))


def shape_problem(shape: ParallelShape, model: ModelFacts) -> str | None:
    """Why the model cannot be split this way (checked before asking the memory estimator), or None."""
    if shape.pp > 1:
        return "pipeline parallelism is not modelled by the replay"
    if model.num_heads % shape.tp:
        return f"{model.num_heads} attention heads do not split over tp={shape.tp}"
    if shape.moe_ep > 1 and model.num_experts and shape.moe_ep > model.num_experts:
        return f"{model.num_experts} experts cannot fill ep={shape.moe_ep}"
    if shape.is_moe_layout and not model.is_moe:
        return "a dense model has no experts to split (moe_tp and moe_ep must be 1)"
    if model.is_moe and shape.tp * shape.attention_dp != shape.moe_tp * shape.moe_ep:
        return (
            f"MoE ranks must match attention ranks: tp x attention_dp = {shape.tp * shape.attention_dp}, "
            f"moe_tp x moe_ep = {shape.moe_tp * shape.moe_ep}"
        )
    return None
