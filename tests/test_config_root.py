"""The whole file: YAML reading, unknown keys at every level, and the error format."""

import pytest
from conftest import REPO, build, config_data, rejected, write_yaml

from spica_lib.config import ConfigError, SmartSearchConfig


@pytest.mark.parametrize(
    "section, path",
    [
        (None, "surprise"),
        ("search_space", "search_space.surprise"),
        ("workload", "workload.surprise"),
        ("goal", "goal.surprise"),
        ("sweep", "sweep.surprise"),
    ],
)
def test_unknown_keys_rejected_at_every_level(section, path):
    data = config_data()
    (data.setdefault(section, {}) if section else data)["surprise"] = 1
    message = rejected(data, path, "unknown key")
    assert "allowed keys here" in message


def test_unknown_key_inside_the_sla():
    rejected(
        config_data(goal={"target": "goodput", "sla": {"ttft_ms": 1, "itl_ms": 1, "tpot_ms": 1}}),
        "goal.sla.tpot_ms",
        "ttft_ms",
    )


def test_missing_required_sections_and_fields():
    rejected({"workload": config_data()["workload"]}, "search_space", "required")
    rejected(
        {"search_space": {"model_name": "x"}, "workload": config_data()["workload"]},
        "search_space.hardware_sku",
        "required",
    )


def test_every_problem_is_reported_at_once():
    data = config_data(search_space={"gpu_budget": 0, "backend": ["tgi"]}, sweep={"max_rounds": 0})
    with pytest.raises(ConfigError) as caught:
        build(data)
    paths = [path for path, _ in caught.value.problems]
    assert {"search_space.gpu_budget", "search_space.backend", "sweep.max_rounds"} <= set(paths)
    assert "3 problem(s)" in str(caught.value)


def test_from_yaml_reads_and_validates(tmp_path):
    path = write_yaml(tmp_path, config_data(search_space={"gpu_budget": 16}))
    assert SmartSearchConfig.from_yaml(path).search_space.gpu_budget == 16


def test_malformed_yaml(tmp_path):
    path = tmp_path / "broken.yaml"
    path.write_text("search_space: [unclosed\n")
    with pytest.raises(ConfigError, match="malformed YAML"):
        SmartSearchConfig.from_yaml(path)


@pytest.mark.parametrize("text", ["", "- a list\n", "just a string\n"])
def test_top_level_must_be_a_mapping(tmp_path, text):
    path = tmp_path / "odd.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match="top level must be a mapping"):
        SmartSearchConfig.from_yaml(path)


def test_yaml_tags_are_not_executed(tmp_path):
    path = tmp_path / "tag.yaml"
    path.write_text("search_space: !!python/object/apply:os.system ['echo hi']\n")
    with pytest.raises(ConfigError, match="malformed YAML"):
        SmartSearchConfig.from_yaml(path)


def test_missing_file():
    with pytest.raises(ConfigError, match="does not exist"):
        SmartSearchConfig.from_yaml("/nonexistent/spica.yaml")


def test_normalised_dump_round_trips():
    config = build(config_data(goal={"target": "goodput", "sla": {"ttft_ms": 100, "itl_ms": 10}}))
    again = SmartSearchConfig.model_validate(config.model_dump(mode="json"))
    assert again == config


@pytest.mark.parametrize(
    "name",
    [
        "default.yaml",
        "examples/trace.yaml",
        "examples/pareto_kv_load.yaml",
        "examples/moe.yaml",
        "examples/pinned_parallel.yaml",
        "examples/p99_sla.yaml",
        "examples/cost.yaml",
        "examples/fleet.yaml",
        "examples/two_workloads.yaml",
    ],
)
def test_shipped_configs_are_valid(name):
    config = SmartSearchConfig.from_yaml(REPO / "config" / name)
    assert config.search_space.model_name


def test_trace_example_finds_the_shipped_trace():
    config = SmartSearchConfig.from_yaml(REPO / "config" / "examples" / "trace.yaml")
    assert config.workload.trace_path == str((REPO / "data" / "traces" / "mooncake_synthetic_trace.jsonl").resolve())


def test_json_schema_describes_every_section():
    schema = SmartSearchConfig.model_json_schema()
    assert set(schema["properties"]) == {"search_space", "workload", "goal", "sweep", "calibration"}
    assert schema["additionalProperties"] is False


def test_a_large_moe_trace_study_loads(tmp_path):
    # The shape of a typical production study: a big MoE model, both modes, a trace, goodput per GPU.
    data = {
        "search_space": {
            "model_name": "deepseek-ai/DeepSeek-V3",
            "hardware_sku": "gb200",
            "deployment_mode": ["disagg", "agg"],
            "backend": ["trtllm", "sglang"],
            "gpu_budget": 64,
            "planner_scaling_policy": ["disabled", "hybrid_180_5", "load_180_5"],
        },
        "workload": {"trace_path": str(REPO / "data" / "traces" / "mooncake_synthetic_trace.jsonl")},
        "goal": {"target": "goodput_per_gpu", "sla": {"ttft_ms": 3000, "itl_ms": 30}},
        "sweep": {"max_rounds": 40},
    }
    config = SmartSearchConfig.from_yaml(write_yaml(tmp_path, data))
    assert config.search_space.deployment_mode == ["disagg", "agg"]
    assert "disabled" in config.search_space.planner_scaling_policy
    assert config.workload.is_trace_based and config.sweep.max_rounds == 40


def test_native_feature_study_loads():
    data = config_data(
        search_space={
            "router_mode": ["kv_router"],
            "deployment_mode": ["agg"],
            "parallel_configs": [{"tp": 1, "replicas": 2}],
        },
        workload={"request_rate": 1},
        sweep={"candidates_per_round": 1},
    )
    config = build(data)
    assert config.search_space.router_mode == ["kv_router"] and config.sweep.per_round == 1


def test_a_nan_or_null_number_is_one_problem_with_one_message():
    # A number field is int | float: both members fail on NaN, and "valid integer" would be the misleading half.
    data = config_data(workload={"num_request_ratio": float("nan")})
    data["search_space"]["gpu_budget"] = float("nan")
    with pytest.raises(ConfigError) as caught:
        build(data)
    paths = [path for path, _ in caught.value.problems]
    assert paths.count("workload.num_request_ratio") == 1 and "valid integer" not in dict(caught.value.problems)["workload.num_request_ratio"]
    assert paths.count("search_space.gpu_budget") == 1  # an int field: its own message stands


def test_a_null_is_the_key_left_out_where_the_default_is_unset_and_refused_by_its_path_elsewhere():
    """The null rule of docs/config.md: `key: null` is `key` left out where the default is "not set"."""
    nulls = config_data()
    nulls["search_space"]["gpus_per_node"] = None
    nulls["sweep"] = {"stress_top": None, "max_rounds": 2}
    assert build(nulls) == build(config_data(sweep={"max_rounds": 2}))
    refused = config_data()
    refused["search_space"].update(gpu_budget=None, router_mode=None)
    refused["goal"] = None
    with pytest.raises(ConfigError) as caught:
        build(refused)
    paths = {path for path, _ in caught.value.problems}
    assert paths == {"search_space.gpu_budget", "search_space.router_mode", "goal"}
    assert "(got None)" in dict(caught.value.problems)["search_space.gpu_budget"]
