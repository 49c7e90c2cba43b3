"""Which knobs a branch searches, and their choices (before the parallel pool is known).

A branch is one deployment mode. Its knobs are the table's (config/knobs.py) list knobs that can matter in it;
those that cannot are left out rather than searched for nothing: the KV router's settings when only round robin is
allowed, those the replay cannot tell apart (host/disk cache weights: it has no host offload), the planner's
sampling and sensitivity when no policy scales, and the other mode's engine knobs.
"""

from __future__ import annotations

import math
from typing import Any

from spica_lib.config import SearchSpace
from spica_lib.config.fields import PLANNER_KNOBS, engine_fields
from spica_lib.config.knobs import router_knobs
from spica_lib.config.presets import CompositeEntry, scaling_policy


def branch_knob_choices(
    space: SearchSpace, mode: str, policies: list[CompositeEntry] | None = None
) -> dict[str, list[Any]]:
    """Knob -> choices for one deployment mode. `policies` overrides the scaling-policy list (filtered)."""
    policies = list(space.planner_scaling_policy if policies is None else policies)
    knobs: list[str] = list(engine_fields(mode, searched=True))
    knobs.append("router_mode")
    if set(space.router_mode) != {"round_robin"}:
        knobs += [knob.name for knob in router_knobs() if not knob.unreplayed]
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
