"""Unrolling: a selection (knob values chosen by the search) and a parallel layout become one flat
`sample` dict — every field a deployment needs, named as the config names them.

Only the active mode's engine fields appear (each per-role knob of the table, config/knobs.py, but for a value
that changes nothing), KV-router weights only under the KV router, and planner fields only when the chosen policy
scales. The load-predictor winner for the policy's throughput
interval is folded in when the policy scales on throughput.
"""

from __future__ import annotations

from typing import Any

from spica_lib.config import SearchSpace
from spica_lib.config.fields import ADMISSION_FIELDS, ROLES, ROUTER_WEIGHTS, SHAPE_FIELDS
from spica_lib.config.knobs import KNOBS, Knob, role_field, role_knobs
from spica_lib.config.presets import CompositeEntry, fpm_sampling, load_predictor, load_sensitivity, scaling_policy
from spica_lib.facts.parallel import DisaggConfig, ParallelConfig, ReplicaConfig, role_configs

MTP = KNOBS["nextn"]
PINNED_FIELDS = (
    "model_name",
    "hardware_sku",
    "gpu_budget",
    "min_gpu_budget",
    "min_endpoint",
    "context_length",
    "startup_time",
)


def unroll_sample(
    space: SearchSpace,
    selection: dict[str, Any],
    parallel_config: ParallelConfig,
    predictor_winners: dict[float, CompositeEntry] | None = None,
) -> dict[str, Any]:
    """The flat deployment description of one candidate. Raises KeyError if a searched knob is missing."""
    mode = selection["deployment_mode"]
    sample: dict[str, Any] = {"deployment_mode": mode, "backend": selection["backend"]}
    sample.update({name: getattr(space, name) for name in PINNED_FIELDS})
    sample.update(_replaced_settings(space, selection, mode))
    if space.aic_fmha_dtype is not None:  # only when set: every other sample (and its trial key) stays as it was
        sample["aic_fmha_dtype"] = space.aic_fmha_dtype
    sample.update(_parallel_fields(mode, parallel_config))
    if space.has_gpu_inventory:
        # The planner has one GPU ceiling for all roles: the GPUs of the types this deployment runs on.
        types = {replica.sku for replica in role_configs(parallel_config).values()}
        sample["gpu_budget"] = sum(space.inventory()[sku] for sku in types)
    sample.update(_engine_fields(space, selection, mode))
    if any(role_field(role, MTP.name) in sample for role in MTP.roles):  # drafting: the acceptance it rests on
        sample["nextn_accept_rates"] = space.nextn_accept_rates
    sample.update(_router_fields(space, selection))
    sample.update(_planner_fields(selection, predictor_winners or {}))
    return sample


def _parallel_fields(mode: str, config: ParallelConfig) -> dict[str, Any]:
    if mode == "agg":
        if not isinstance(config, ReplicaConfig):
            raise TypeError(f"an agg candidate needs a replica config, got {type(config).__name__}")
        return {**_role_shape("", config), "used_gpus": config.total_gpus}
    if not isinstance(config, DisaggConfig):
        raise TypeError(f"a disagg candidate needs a prefill/decode config, got {type(config).__name__}")
    return {
        **_role_shape("prefill_", config.prefill),
        **_role_shape("decode_", config.decode),
        "used_gpus": config.total_gpus,
    }


def _role_shape(prefix: str, replica: ReplicaConfig) -> dict[str, Any]:
    fields = {f"{prefix}{name}": getattr(replica.shape, name) for name in SHAPE_FIELDS}
    fields[f"{prefix}strategy"] = replica.shape.strategy
    fields[f"{prefix}replicas"] = replica.replicas
    if replica.sku is not None:  # an inventory of several GPU types: this role's
        fields[f"{prefix}sku"] = replica.sku
    return fields


def _engine_fields(space: SearchSpace, selection: dict[str, Any], mode: str) -> dict[str, Any]:
    """Each role's engine knobs: searched ones from the selection, pinned ones from the space; a value that changes
    nothing is left out, so a sample (and the trial) of a space that never moves it is what it was before."""
    fields: dict[str, Any] = {}
    for role in ROLES[mode]:
        for knob in role_knobs(role):
            name = role_field(role, knob.name)
            value = _knob_value(space, selection, knob, name)
            if value != knob.inert:
                fields[name] = value
    return fields


def _knob_value(space: SearchSpace, selection: dict[str, Any], knob: Knob, name: str) -> Any:
    """A knob field's value in this candidate. A selection made before the knob was in the table (a stored trial)
    has none; where the space pins it to one value, that is its value."""
    if not knob.searched:
        return getattr(space, name)
    listed = getattr(space, name)
    return selection[name] if name in selection or len(listed) != 1 else listed[0]


def _replaced_settings(space: SearchSpace, selection: dict[str, Any], mode: str) -> dict[str, Any]:
    """The setting a knob replaced, unset, where this deployment leaves the knob at what changes nothing (the old
    `aic_nextn: None` of a deployment that drafts no MTP tokens): its samples and ranked.csv columns of before."""
    out = {}
    for knob in KNOBS.values():
        roles = [role for role in ROLES[mode] if role in knob.roles]
        values = [_knob_value(space, selection, knob, role_field(role, knob.name)) for role in roles]
        if knob.was and all(value == knob.inert for value in values):
            out[knob.was] = None
    return out


def _router_fields(space: SearchSpace, selection: dict[str, Any]) -> dict[str, Any]:
    mode = selection.get("router_mode", "round_robin")
    fields: dict[str, Any] = {"router_mode": mode}
    if mode == "kv_router":
        fields.update({k: selection[k] for k in ROUTER_WEIGHTS if k in selection})
        fields.update({k: getattr(space, k) for k in ADMISSION_FIELDS})
    return fields


def as_round_robin(sample: dict[str, Any]) -> dict[str, Any]:
    """The sample with the KV router replaced by round robin, and the router's own fields dropped."""
    dropped = set(ROUTER_WEIGHTS) | set(ADMISSION_FIELDS)
    return {**{k: v for k, v in sample.items() if k not in dropped}, "router_mode": "round_robin"}


def _planner_fields(selection: dict[str, Any], winners: dict[float, CompositeEntry]) -> dict[str, Any]:
    entry = selection["planner_scaling_policy"]
    policy = scaling_policy(entry)
    fields: dict[str, Any] = {
        "planner_scaling_policy": entry,
        "enable_throughput_scaling": policy.enable_throughput_scaling,
        "enable_load_scaling": policy.enable_load_scaling,
    }
    if not policy.scales:
        return fields
    fields["throughput_adjustment_interval_seconds"] = policy.throughput_adjustment_interval_seconds
    fields["load_adjustment_interval_seconds"] = policy.load_adjustment_interval_seconds
    fields.update(fpm_sampling(selection["planner_fpm_sampling"]).model_dump())
    fields.update(load_sensitivity(selection["planner_load_sensitivity"]).model_dump())
    interval = policy.throughput_adjustment_interval_seconds
    if policy.enable_throughput_scaling and interval is not None:
        winner = winners.get(float(interval))
        if winner is not None:
            fields.update(load_predictor(winner).fields())
    return fields
