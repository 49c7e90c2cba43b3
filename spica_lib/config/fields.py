"""The shared vocabulary: deployment modes, roles, layout fields and the groups of knobs several stages spell.

A role's engine knob is named `<role>_<knob>` (`agg_max_num_seqs`, `prefill_block_size`: config/knobs.py's
`role_field`); a disagg role's layout field is `<role>_<shape field>` (`decode_tp`), an agg one is the bare field
(`tp`). The knob groups are read from the knob table (config/knobs.py), never listed again here.
"""

from __future__ import annotations

from spica_lib.config.knobs import KNOBS, role_field, role_knobs, router_knobs
from spica_lib.facts.parallel import ParallelShape

DEPLOYMENT_MODES: tuple[str, ...] = KNOBS["deployment_mode"].choices
BACKENDS: tuple[str, ...] = KNOBS["backend"].choices
ROLES: dict[str, tuple[str, ...]] = {"agg": ("agg",), "disagg": ("prefill", "decode")}

SHAPE_FIELDS: tuple[str, ...] = tuple(ParallelShape.model_fields)  # tp, attention_dp, moe_tp, moe_ep, pp
PARALLEL_KEYS = (*SHAPE_FIELDS, "replicas")  # what a `parallel_configs` entry may give

ROUTER_WEIGHTS = tuple(knob.name for knob in router_knobs())  # the KV router's own settings
OFFLOAD_WEIGHTS = tuple(knob.name for knob in router_knobs() if knob.unreplayed)  # only matter with host offload
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


def engine_fields(mode: str, searched: bool | None = None) -> tuple[str, ...]:
    """The per-role knobs' fields of a deployment mode, role by role: the searched ones, the pinned ones, or (None)
    both."""
    return tuple(
        role_field(role, knob.name)
        for role in ROLES[mode]
        for knob in role_knobs(role)
        if searched is None or knob.searched == searched
    )
