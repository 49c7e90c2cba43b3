"""Which knobs a branch searches, and their choices (before the parallel pool is known).

A branch is one deployment mode. Knobs that cannot matter in it are left out rather than searched
for nothing: the KV router's weights when only round robin is allowed, host/disk cache weights
(the replay has no host offload), the planner's sampling and sensitivity when no policy scales, and the other
mode's engine knobs.
"""

from __future__ import annotations

import math
from typing import Any

from spica_lib.config import SearchSpace
from spica_lib.config.fields import OFFLOAD_WEIGHTS, PLANNER_KNOBS, ROUTER_KNOBS, engine_knobs
from spica_lib.config.presets import CompositeEntry, scaling_policy


def branch_knob_choices(
    space: SearchSpace, mode: str, policies: list[CompositeEntry] | None = None
) -> dict[str, list[Any]]:
    """Knob -> choices for one deployment mode. `policies` overrides the scaling-policy list (filtered)."""
    policies = list(space.planner_scaling_policy if policies is None else policies)
    knobs: list[str] = list(engine_knobs(mode))
    if set(space.router_mode) == {"round_robin"}:
        knobs.append("router_mode")
    else:
        knobs += [k for k in ROUTER_KNOBS if k not in OFFLOAD_WEIGHTS]  # the replay has no host tier
    if any(scaling_policy(p).scales for p in policies):
        knobs += PLANNER_KNOBS
    else:
        knobs.append("planner_scaling_policy")
    choices = {knob: list(getattr(space, knob)) for knob in knobs}
    choices["planner_scaling_policy"] = policies
    return choices


def combinations(choices: dict[str, list[Any]]) -> int:
    """How many distinct knob settings a branch offers (parallel layouts and backends not counted)."""
    return math.prod(len(values) for values in choices.values())
