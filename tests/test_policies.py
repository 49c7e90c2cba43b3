"""Stage `policies`: the two filter rules, their artifact, and the 'nothing left' errors."""

import pytest
from conftest import build, config_data

from spica_lib.config import ConfigError
from spica_lib.config.policies import apply_policy_filters, filter_scaling_policies

TPUT_DICT = {
    "enable_throughput_scaling": True,
    "enable_load_scaling": False,
    "throughput_adjustment_interval_seconds": 300,
    "load_adjustment_interval_seconds": None,
}
LOAD_DICT = {
    "enable_throughput_scaling": False,
    "enable_load_scaling": True,
    "throughput_adjustment_interval_seconds": None,
    "load_adjustment_interval_seconds": 7,
}
SLA = {"ttft_ms": 2000, "itl_ms": 50}


def test_filter_keeps_everything_when_throughput_scaling_is_allowed():
    policies = ["disabled", "throughput_180_5", TPUT_DICT]
    assert filter_scaling_policies(policies, allow_throughput=True) == (policies, [])


def test_filter_drops_throughput_presets_and_dicts_in_order():
    policies = ["disabled", "throughput_180_5", "load_180_5", TPUT_DICT, "hybrid_600_5", LOAD_DICT]
    kept, dropped = filter_scaling_policies(policies, allow_throughput=False)
    assert kept == ["disabled", "load_180_5", LOAD_DICT]
    assert dropped == ["throughput_180_5", TPUT_DICT, "hybrid_600_5"]


def policies_for(goal, policies):
    return apply_policy_filters(build(config_data(goal=goal, search_space={"planner_scaling_policy": policies})))


def test_goodput_goal_keeps_throughput_scaling():
    result = policies_for({"target": "goodput", "sla": SLA}, ["disabled", "throughput_180_5", "hybrid_600_5"])
    assert result.planner_target == "sla"
    assert result.kept == ["disabled", "throughput_180_5", "hybrid_600_5"] and result.dropped == []
    assert result.throughput_intervals == [180, 600]


def test_non_sla_goal_drops_throughput_scaling_with_a_reason():
    result = policies_for({"target": "throughput"}, ["throughput_180_5", "load_180_5", "disabled"])
    assert result.kept == ["load_180_5", "disabled"]
    assert [d.label for d in result.dropped] == ["throughput_180_5"]
    assert result.dropped[0].rule == "needs_sla_target" and "'throughput'" in result.dropped[0].reason
    assert result.throughput_intervals == []


def test_non_sla_goal_with_only_throughput_policies_cannot_run():
    with pytest.raises(ConfigError, match="scales on throughput") as caught:
        policies_for({"target": "throughput_per_gpu"}, ["throughput_180_5", "hybrid_180_5"])
    assert caught.value.problems[0][0] == "search_space.planner_scaling_policy"


def test_e2e_only_sla_keeps_only_non_scaling_policies():
    result = policies_for(
        {"target": "goodput", "sla": {"e2e_ms": 8000}}, ["disabled", "load_180_5", "throughput_180_5"]
    )
    assert result.kept == ["disabled"]
    assert {d.label: d.rule for d in result.dropped} == {
        "load_180_5": "needs_ttft_and_itl",
        "throughput_180_5": "needs_ttft_and_itl",
    }


def test_e2e_only_sla_with_only_scaling_policies_cannot_run():
    with pytest.raises(ConfigError, match="e2e-only SLA"):
        policies_for({"target": "goodput_per_gpu", "sla": {"e2e_ms": 8000}}, ["load_180_5", "hybrid_180_5"])


def test_pareto_goal_uses_the_throughput_planner_target():
    result = policies_for({"target": "pareto"}, ["disabled", "throughput_600_5"])
    assert result.planner_target == "throughput" and result.kept == ["disabled"]
