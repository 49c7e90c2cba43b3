"""Stage `policies`: drop the planner scaling policies this goal cannot use.

Two rules, in order. (1) Throughput-based scaling sizes the fleet to meet an SLA, so it is only
kept when the goal's planner target is `sla` (a goodput goal). (2) The planner's SLA scaling needs
both a TTFT and an ITL bound; with an end-to-end-only SLA every scaling policy is dropped.
If nothing is left the config cannot run, and the error says what to add.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

from spica_lib.config import ConfigError, SmartSearchConfig
from spica_lib.config.presets import CompositeEntry, policy_label, scaling_policy, throughput_intervals

SCHEMA_VERSION = 1
FIELD = "search_space.planner_scaling_policy"


class DroppedPolicy(BaseModel):
    model_config = ConfigDict(extra="forbid")

    policy: CompositeEntry
    label: str
    rule: Literal["needs_sla_target", "needs_ttft_and_itl"]
    reason: str


class PolicyFilter(BaseModel):
    """Artifact `policies.json`: the scaling policies the search may use, and why others were dropped."""

    model_config = ConfigDict(extra="forbid")

    schema_version: int = SCHEMA_VERSION
    goal_target: str
    planner_target: str
    kept: list[CompositeEntry]
    dropped: list[DroppedPolicy]
    throughput_intervals: list[float]


def filter_scaling_policies(
    policies: list[CompositeEntry], allow_throughput: bool
) -> tuple[list[CompositeEntry], list[CompositeEntry]]:
    """Split policies into (kept, dropped), dropping throughput scaling unless allowed. Order is kept."""
    if allow_throughput:
        return list(policies), []
    kept = [p for p in policies if not scaling_policy(p).enable_throughput_scaling]
    dropped = [p for p in policies if scaling_policy(p).enable_throughput_scaling]
    return kept, dropped


def apply_policy_filters(config: SmartSearchConfig) -> PolicyFilter:
    """Both filter rules; raises ConfigError when no policy survives."""
    goal = config.goal
    planner_target = goal.target.planner_optimization_target
    policies = list(config.search_space.planner_scaling_policy)
    dropped: list[DroppedPolicy] = []

    kept, removed = filter_scaling_policies(policies, allow_throughput=planner_target == "sla")
    reason = f"throughput scaling sizes the fleet for an SLA; target {goal.target.value!r} has none to meet"
    dropped += [_dropped(p, "needs_sla_target", reason) for p in removed]
    if not kept:
        raise ConfigError(
            [
                (
                    FIELD,
                    f"every policy {_labels(policies)} scales on throughput, which a {goal.target.value!r} goal cannot "
                    "use (it has no SLA); use a goodput target, or add 'disabled' or a load_* policy",
                )
            ]
        )

    if planner_target == "sla" and goal.sla is not None and not goal.sla.seeds_planner:
        before = kept
        kept = [p for p in before if not scaling_policy(p).scales]
        reason = "the planner scales to ttft_ms and itl_ms bounds; an e2e-only SLA cannot set them"
        dropped += [_dropped(p, "needs_ttft_and_itl", reason) for p in before if scaling_policy(p).scales]
        if not kept:
            raise ConfigError(
                [
                    (
                        FIELD,
                        f"every policy {_labels(before)} scales the planner, but an e2e-only SLA cannot drive it; "
                        "give goal.sla ttft_ms and itl_ms, or add 'disabled'",
                    )
                ]
            )

    return PolicyFilter(
        goal_target=goal.target.value,
        planner_target=planner_target,
        kept=kept,
        dropped=dropped,
        throughput_intervals=throughput_intervals(kept),
    )


def _dropped(policy: CompositeEntry, rule: str, reason: str) -> DroppedPolicy:
    return DroppedPolicy(policy=policy, label=policy_label(policy), rule=rule, reason=reason)


def _labels(policies: list[CompositeEntry]) -> list[str]:
    return [policy_label(p) for p in policies]
