"""A DynamoGraphDeploymentRequest as input: read strictly, mapped onto the default question, refused by its paths."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml
from conftest import REPO, write_yaml

from spica_lib.config import ConfigError, SmartSearchConfig
from spica_lib.config.dgd_override import merge_override
from spica_lib.config.dgdr_request import request_problems
from spica_lib.config.fields import BACKENDS
from spica_lib.config.validate import build_validated_config, check_config
from spica_lib.facts.catalog import resolve_backend_version
from spica_lib.pools.branches import enumerate_branches

EXAMPLE = REPO / "config" / "examples" / "dgdr.yaml"


def example() -> dict[str, Any]:
    return yaml.safe_load(EXAMPLE.read_text())


def test_the_example_asks_the_default_question(tmp_path):
    """The mapped DGDR and config/default.yaml (with `auto`'s backends, which a DGDR cannot list two of) search
    the same branches: the same pools, knob choices, traffic, goal and rounds."""
    mapped = SmartSearchConfig.from_yaml(EXAMPLE)
    data = yaml.safe_load((REPO / "config" / "default.yaml").read_text())
    data["search_space"]["backend"] = [b for b in BACKENDS if resolve_backend_version("h200_sxm", b)]
    default = SmartSearchConfig.from_mapping(data)
    assert mapped.search_space.gpus_per_node == 8 and default.search_space.gpus_per_node is None
    node = {"gpus_per_node"}
    assert mapped.search_space.model_dump(exclude=node) == default.search_space.model_dump(exclude=node)
    for section in ("workload", "goal", "sweep", "calibration"):
        assert getattr(mapped, section) == getattr(default, section), section
    for ours, theirs in zip(enumerate_branches(mapped), enumerate_branches(default), strict=True):
        assert ours.spec == theirs.spec and ours.pool == theirs.pool


def test_validate_prints_one_line_per_defaulted_or_reinterpreted_field_and_config_json_keeps_them(capsys):
    from spica_lib.cli.main import main

    assert main(["validate", str(EXAMPLE)]) == 0
    out = capsys.readouterr().out
    assert "DGDR field -> Spica setting" in out
    assert "spec.backend auto -> search_space.backend ['vllm', 'sglang', 'trtllm']" in out
    assert "does not read optimizationType" in out and "Spica replays in both strategies" in out
    validated = build_validated_config(EXAMPLE)
    again = type(validated).model_validate_json(validated.model_dump_json())  # config.json reads back
    assert again.config.dgdr.mapping == validated.config.dgdr.mapping
    assert again.config.dgdr.request["spec"]["model"] == "Qwen/Qwen3-32B"
    assert any(line.startswith("spec.features.planner (not given)") for line in validated.config.dgdr.mapping)


def _with(change: dict[str, Any], drop: tuple[str, ...] = ()) -> dict[str, Any]:
    data = example()
    for dotted, value in change.items():
        *parents, key = dotted.split(".")
        holder = data
        for part in parents:
            holder = holder.setdefault(part, {})
        holder[key] = value
    for dotted in drop:
        *parents, key = dotted.split(".")
        holder = data
        for part in parents:
            holder = holder[part]
        del holder[key]
    return data


# Each bad input of the issue, refused before anything runs, by the DGDR field's path.
BAD = {
    "another version": (_with({"apiVersion": "nvidia.com/v1alpha1"}), "apiVersion", "nvidia.com/v1beta1"),
    "a missing spec": (_with({}, drop=("spec",)), "spec", "required"),
    "a missing model": (_with({}, drop=("spec.model",)), "spec.model", "missing"),
    "an unknown key in the workload": (_with({"spec.workload.islx": 3}), "spec.workload.islx", "unknown key"),
    "an unknown key at the top": (_with({"specs": {}}), "specs", "unknown key"),
    "an unknown key in metadata": (_with({"metadata.uid": "x"}), "metadata.uid", "unknown key"),
    "an unknown key in hardware": (_with({"spec.hardware.gpusku": "h200_sxm"}), "spec.hardware.gpusku", "unknown key"),
    "an unknown planner key": (
        _with({"spec.features.planner": {"scale": 1}}), "spec.features.planner.scale", "unknown"
    ),  # fmt: skip
    "a status in the request": (_with({"status": {"phase": "Ready"}}), "status", "Spica writes the status"),
    "both concurrency and requestRate": (_with({"spec.workload.concurrency": 8}), "spec.workload", "both"),
    "a fractional concurrency": (
        _with({"spec.workload.concurrency": 2.5}, drop=("spec.workload.requestRate",)),
        "spec.workload.concurrency", "whole number",
    ),  # fmt: skip
    "an unknown GPU SKU": (_with({"spec.hardware.gpuSku": "h300_sxm"}), "spec.hardware.gpuSku", "h300_sxm"),
    "a GPU SKU without perf data": (_with({"spec.hardware.gpuSku": "t4"}), "spec.hardware.gpuSku", "no aiconfigurator"),
    "no GPU SKU": (_with({}, drop=("spec.hardware.gpuSku",)), "spec.hardware.gpuSku", "required"),
    "fewer GPUs than the model needs": (
        _with({"spec.hardware.gpuSku": "l40s", "spec.hardware.totalGpus": 1}, drop=("spec.hardware.numGpusPerNode",)),
        "spec.hardware.totalGpus", "weights alone",
    ),  # fmt: skip
    "a node larger than the system's": (
        _with({"spec.hardware.numGpusPerNode": 16}), "spec.hardware.numGpusPerNode", "contradicts h200_sxm"
    ),  # fmt: skip
    "a planner field the replay does not simulate": (
        _with({"spec.features.planner": {"enable_power_awareness": True}}),
        "spec.features.planner.enable_power_awareness", "does not simulate",
    ),  # fmt: skip
    "a planner budget that contradicts totalGpus": (
        _with({"spec.features.planner": {"max_gpu_budget": 16}}), "spec.features.planner.max_gpu_budget", "totalGpus"
    ),  # fmt: skip
    "an override of a replayed setting": (
        _with({"spec.overrides.dgd": {"apiVersion": "nvidia.com/v1beta1", "kind": "DynamoGraphDeployment",
                                      "spec": {"components": [{"name": "decode", "replicas": 3}]}}}),
        "spec.overrides.dgd.spec.components[0].replicas", "refused",
    ),  # fmt: skip
    "an override of the engine's flags": (
        _with({"spec.overrides.dgd": {"apiVersion": "nvidia.com/v1beta1", "kind": "DynamoGraphDeployment", "spec": {
            "components": [{"name": "worker", "podTemplate": {"spec": {"containers": [{"name": "main", "args": []}]}}}]
        }}}),
        "spec.overrides.dgd.spec.components[0].podTemplate.spec.containers[0].args", "refused",
    ),  # fmt: skip
    "a sweep annotation that is not a mapping": (
        _with({"metadata.annotations": {"spica.dev/sweep": "[1, 2]"}}),
        "metadata.annotations.spica.dev/sweep", "JSON object",
    ),  # fmt: skip
    "a sweep annotation the sweep refuses": (
        _with({"metadata.annotations": {"spica.dev/sweep": '{"max_rounds": 0}'}}),
        "metadata.annotations.spica.dev/sweep", "greater than or equal to 1",
    ),  # fmt: skip
}


@pytest.mark.parametrize("case", BAD, ids=list(BAD))
def test_a_bad_request_is_refused_before_anything_runs_by_the_dgdr_field_s_path(tmp_path, case):
    data, path, fragment = BAD[case]
    with pytest.raises(ConfigError) as caught:
        check_config(write_yaml(tmp_path, data))
    found = [(where, message) for where, message in caught.value.problems if where.split(" ")[0] == path]
    assert found, caught.value.problems
    assert any(fragment in message for _, message in found), found
    assert str(caught.value).startswith("invalid DynamoGraphDeploymentRequest")


def test_another_kind_is_refused_by_its_kind(tmp_path):
    with pytest.raises(ConfigError) as caught:
        check_config(write_yaml(tmp_path, _with({"kind": "DynamoGraphDeployment"})))
    assert caught.value.problems[0][0] == "kind"


def test_a_sweep_config_may_not_write_the_dgdr_block_itself(tmp_path):
    data = yaml.safe_load((REPO / "config" / "default.yaml").read_text())
    data["dgdr"] = {"request": {}, "mapping": [], "origins": {}}
    with pytest.raises(ConfigError, match="hand Spica the DGDR itself"):
        SmartSearchConfig.from_yaml(write_yaml(tmp_path, data))


def test_the_features_pin_the_router_and_put_the_given_planner_in_the_replay(tmp_path):
    planner = {"enable_throughput_scaling": False, "enable_load_scaling": True, "load_adjustment_interval_seconds": 10,
               "load_min_observations": 3, "mode": "disagg", "min_endpoint": 2}  # fmt: skip
    data = _with({"spec.features": {"kvRouter": {"enabled": True}, "planner": planner, "mocker": {"enabled": True}}})
    config = SmartSearchConfig.from_yaml(write_yaml(tmp_path, data))
    space = config.search_space
    assert space.router_mode == ["kv_router"] and space.deployment_mode == ["disagg"] and space.min_endpoint == 2
    assert space.planner_scaling_policy == [{"enable_throughput_scaling": False, "enable_load_scaling": True,
                                             "throughput_adjustment_interval_seconds": 180,
                                             "load_adjustment_interval_seconds": 10}]  # fmt: skip
    assert space.planner_load_sensitivity == [{"load_scaling_down_sensitivity": 80, "load_min_observations": 3}]
    assert "agg_max_num_seqs" not in space.model_fields_set  # the default question's agg knobs: inert, left out
    notes = "\n".join(config.dgdr.mapping)
    assert "PlannerConfig's defaults" in notes and "spec.features.mocker -> nothing to search" in notes
    off = SmartSearchConfig.from_yaml(write_yaml(tmp_path, _with({"spec.features": {"kvRouter": {"enabled": False}}})))
    assert off.search_space.router_mode == ["round_robin"]


def test_no_load_is_the_maximum_throughput_case_and_a_latency_goal_bounds_the_median(tmp_path):
    latency = {"ttft": 500, "itl": 20, "optimizationType": "latency"}
    data = _with({"spec.sla": latency}, drop=("spec.workload.requestRate",))
    config = SmartSearchConfig.from_yaml(write_yaml(tmp_path, data))
    assert config.workload.kv_load_ratio == 1.0 and config.workload.request_rate is None
    assert config.goal.target.value == "e2e_latency" and config.goal.sla.percentile == 50
    assert any("maximum-throughput" in line for line in config.dgdr.mapping)
    e2e = _with({"spec.sla": {"e2eLatency": 8000}, "spec.searchStrategy": "thorough"})
    config = SmartSearchConfig.from_yaml(write_yaml(tmp_path, e2e, "e2e.yaml"))
    assert config.goal.sla.e2e_ms == 8000 and config.goal.sla.ttft_ms is None and config.goal.sla.itl_ms is None
    assert config.sweep.max_rounds == 20 and config.sweep.candidates_per_round == 16


def test_a_defaulted_itl_and_a_gb200_sku_are_said(tmp_path):
    data = _with({"spec.sla": {"ttft": 1000}, "spec.hardware.gpuSku": "gb200_sxm", "spec.hardware.numGpusPerNode": 4})
    config = SmartSearchConfig.from_yaml(write_yaml(tmp_path, data))
    assert config.search_space.hardware_sku == "gb200" and config.goal.sla.itl_ms == 30
    notes = "\n".join(config.dgdr.mapping)
    assert "spec.sla.itl (not given) -> goal.sla.itl_ms 30: Dynamo's default" in notes
    assert "spec.hardware.gpuSku gb200_sxm -> search_space.hardware_sku gb200" in notes


def test_the_override_merges_components_by_name_and_named_lists_item_by_item():
    dgd = {"metadata": {"name": "d", "labels": {"a": "1"}}, "spec": {"components": [
        {"name": "frontend", "podTemplate": {"spec": {"containers": [{"name": "main", "image": "i",
                                                                      "env": [{"name": "X", "value": "1"}]}]}}},
        {"name": "worker", "replicas": 2},
    ]}}  # fmt: skip
    override = {"metadata": {"labels": {"b": "2"}}, "spec": {"components": [
        {"name": "frontend", "podTemplate": {"spec": {"containers": [{"name": "main", "env": [
            {"name": "X", "value": "2"}, {"name": "Y", "value": "3"}]}], "tolerations": [{"key": "k"}]}}},
        {"name": "prefill", "podTemplate": {"spec": {"tolerations": []}}},
    ]}}  # fmt: skip
    before = copy.deepcopy(dgd)
    merged, absent = merge_override(dgd, override)
    assert dgd == before and absent == ["prefill"]
    assert merged["metadata"]["labels"] == {"a": "1", "b": "2"}
    main = merged["spec"]["components"][0]["podTemplate"]["spec"]["containers"][0]
    assert main["image"] == "i" and main["env"] == [{"name": "X", "value": "2"}, {"name": "Y", "value": "3"}]
    assert merged["spec"]["components"][0]["podTemplate"]["spec"]["tolerations"] == [{"key": "k"}]
    assert merged["spec"]["components"][1] == {"name": "worker", "replicas": 2}


def test_a_status_document_is_checked_strictly_too():
    data = example()
    assert request_problems({**data, "status": {"phase": "Ready", "dgdName": "x"}}, status=True) == []
    assert request_problems({**data, "status": {"phase": "Done"}}, status=True)[0][0] == "status.phase"
    assert request_problems({**data, "status": {"phaze": "Ready"}}, status=True)[0][0] == "status.phaze"
