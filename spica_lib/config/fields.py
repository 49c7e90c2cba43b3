"""The shared vocabulary: deployment modes, roles, layout fields and the knob names several stages spell.

A role's engine knob is named `<role>_<knob>` (`agg_max_num_seqs`, `prefill_block_size`); a disagg
role's layout field is `<role>_<shape field>` (`decode_tp`), an agg one is the bare field (`tp`).
"""

from __future__ import annotations

from spica_lib.facts.parallel import ParallelShape

DEPLOYMENT_MODES = ("disagg", "agg")
BACKENDS = ("vllm", "sglang", "trtllm")
ROLES: dict[str, tuple[str, ...]] = {"agg": ("agg",), "disagg": ("prefill", "decode")}

SHAPE_FIELDS: tuple[str, ...] = tuple(ParallelShape.model_fields)  # tp, attention_dp, moe_tp, moe_ep, pp
PARALLEL_KEYS = (*SHAPE_FIELDS, "replicas")  # what a `parallel_configs` entry may give

ENGINE_KNOBS = ("max_num_batched_tokens", "max_num_seqs")  # searched, per role
ENGINE_PINS = ("block_size", "gpu_memory_utilization", "enable_prefix_caching")  # pinned, per role

ROUTER_WEIGHTS = (
    "overlap_score_credit",
    "prefill_load_scale",
    "host_cache_hit_weight",
    "disk_cache_hit_weight",
    "router_temperature",
)
ROUTER_KNOBS = ("router_mode", *ROUTER_WEIGHTS)
OFFLOAD_WEIGHTS = ("host_cache_hit_weight", "disk_cache_hit_weight")  # only matter with host offload
OFFLOAD_FIELDS = (
    "num_g2_blocks",
    "kv_bytes_per_token",
    "bandwidth_g1_to_g2_gbps",
    "bandwidth_g2_to_g1_gbps",
    "offload_batch_size",
)
ADMISSION_FIELDS = (
    "active_decode_blocks_threshold",
    "active_prefill_tokens_threshold",
    "active_prefill_tokens_threshold_frac",
    "no_admission_control",
)
PLANNER_KNOBS = ("planner_scaling_policy", "planner_fpm_sampling", "planner_load_sensitivity")


def role_prefix(mode: str, role: str) -> str:
    """How a role's layout fields are prefixed: none in agg, `prefill_` / `decode_` in disagg."""
    return "" if mode == "agg" else f"{role}_"


def engine_knobs(mode: str) -> tuple[str, ...]:
    """The searched engine knobs of a deployment mode, role by role."""
    return tuple(f"{role}_{knob}" for role in ROLES[mode] for knob in ENGINE_KNOBS)
