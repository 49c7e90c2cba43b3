"""One deployment in one line, the way an engineer would say it:
`disagg 2×P(tp2) + 1×D(tp4) · sglang · P 8192 tok/32 seqs, D 8192 tok/256 seqs/MTP 2 · kv_router(credit 0.5) ·
planner load_180_5`: each role's searched engine knobs and the KV router's settings, as the knob table
(config/knobs.py) labels them; a value that changes nothing is not said."""

from __future__ import annotations

from typing import Any

from spica_lib.config.fields import ROLES
from spica_lib.config.knobs import role_field, role_knobs, router_knobs
from spica_lib.config.presets import scaling_policy
from spica_lib.facts.parallel import DisaggConfig, ReplicaConfig
from spica_lib.trial.spec import TrialSpec


def describe(spec: TrialSpec) -> str:
    sample = spec.sample
    parts = [_layout(spec.parallel_config), str(sample["backend"]), _engines(spec), _router(sample)]
    policy = sample.get("planner_scaling_policy")
    if policy is not None and scaling_policy(policy).scales:
        parts.append(f"planner {policy if isinstance(policy, str) else 'custom'}")
    return " · ".join(parts)


def _layout(config: ReplicaConfig | DisaggConfig) -> str:
    if isinstance(config, DisaggConfig):
        prefill, decode = config.prefill, config.decode
        return f"disagg {prefill.replicas}×P({_shape(prefill)}) + {decode.replicas}×D({_shape(decode)})"
    return f"agg {config.replicas}×({_shape(config)})"


def _shape(replica: ReplicaConfig) -> str:
    return replica.shape.label() + (f" on {replica.sku}" if replica.sku else "")


def _engines(spec: TrialSpec) -> str:
    sample = spec.sample
    roles = ROLES[spec.deployment_mode]
    limits = ["/".join(_labelled(sample, role_knobs(role), role)) for role in roles]
    return limits[0] if len(roles) == 1 else ", ".join(f"{r[0].upper()} {limit}" for r, limit in zip(roles, limits))


def _labelled(sample: dict[str, Any], knobs: list[Any], role: str | None = None) -> list[str]:
    """Each labelled knob's value in the sample (a per-role one's for `role`), as the table labels it."""
    names = [(knob, role_field(role, knob.name) if role else knob.name) for knob in knobs if knob.label]
    return [knob.label.format(sample[name]) for knob, name in names if name in sample]


def _router(sample: dict[str, Any]) -> str:
    mode = sample.get("router_mode", "round_robin")
    weights = _labelled(sample, router_knobs())
    return f"{mode}({', '.join(weights)})" if mode == "kv_router" and weights else mode
