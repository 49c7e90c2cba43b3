"""One deployment in one line, the way an engineer would say it:
`disagg 2×P(tp2) + 1×D(tp4) · sglang · P 32 seqs/8192 tok, D 256 seqs/8192 tok · kv_router(credit 0.5) · planner
load_180_5` (engine limits per role: max_num_seqs / max_num_batched_tokens)."""

from __future__ import annotations

from typing import Any

from spica_lib.config.fields import ROLES
from spica_lib.config.presets import scaling_policy
from spica_lib.facts.parallel import DisaggConfig, ReplicaConfig
from spica_lib.trial.spec import TrialSpec

ROUTER_SHORT = {"overlap_score_credit": "credit", "prefill_load_scale": "load", "router_temperature": "temp"}


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
    limits = [f"{sample[f'{r}_max_num_seqs']} seqs/{sample[f'{r}_max_num_batched_tokens']} tok" for r in roles]
    return limits[0] if len(roles) == 1 else ", ".join(f"{r[0].upper()} {limit}" for r, limit in zip(roles, limits))


def _router(sample: dict[str, Any]) -> str:
    mode = sample.get("router_mode", "round_robin")
    weights = [f"{short} {sample[name]:g}" for name, short in ROUTER_SHORT.items() if name in sample]
    return f"{mode}({', '.join(weights)})" if mode == "kv_router" and weights else mode
