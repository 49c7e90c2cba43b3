"""Narrowing a search space without leaving settings behind that the narrowing makes inert.

A config that lists only round robin cannot also weigh the KV router, and one that searches only
aggregated deployments cannot also set the prefill engines: `spica validate` refuses both (a
setting that does nothing is an error). Code that derives a config from another (a benchmark, a
test, a user's script starting from config/default.yaml) narrows it here, and what the narrowing
makes inert is left out with it.
"""

from __future__ import annotations

from typing import Any

from spica_lib.config.fields import ADMISSION_FIELDS, ROLES, engine_fields
from spica_lib.config.knobs import KNOBS, router_knobs
from spica_lib.config.presets import scaling_policy

KV_ROUTER_ONLY = (*(knob.name for knob in router_knobs() if not knob.unreplayed), *ADMISSION_FIELDS)


def narrowed(search_space: dict[str, Any], **lists: list[Any]) -> dict[str, Any]:
    """A copy of the `search_space` mapping with `lists` (deployment_mode, router_mode,
    planner_scaling_policy, ...) set, and the settings they make inert left out."""
    space = {**search_space, **lists}
    modes = space.get("deployment_mode", KNOBS["deployment_mode"].default)
    for mode in ROLES:
        if mode not in modes:
            for name in engine_fields(mode):
                space.pop(name, None)
    if "router_mode" in space and "kv_router" not in space["router_mode"]:
        for name in KV_ROUTER_ONLY:
            space.pop(name, None)
    if "planner_scaling_policy" in space:
        policies = [scaling_policy(entry) for entry in space["planner_scaling_policy"]]
        if not any(p.scales for p in policies):
            for name in ("planner_fpm_sampling", "startup_time", "min_endpoint"):
                space.pop(name, None)
        if not any(p.enable_load_scaling for p in policies):
            space.pop("planner_load_sensitivity", None)
        if not any(p.enable_throughput_scaling for p in policies):
            space.pop("load_predictor_candidates", None)
    return space
