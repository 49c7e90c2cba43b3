"""Stage `validate`: normalised config, hash, run id, provenance; and the run layout."""

import json
import os

import pytest
from conftest import TRACE, config_data, write_yaml

from spica_lib.base.artifacts import read_model, write_model
from spica_lib.config import ConfigError
from spica_lib.config.validate import ValidatedConfig, build_validated_config
from spica_lib.run.layout import locate_config, prepare_run

pytestmark = pytest.mark.slow


def test_validated_config_fills_defaults_and_records_provenance(tmp_path):
    path = write_yaml(tmp_path, config_data(search_space={"backend": ["vllm", "sglang"]}))
    validated = build_validated_config(path)
    assert validated.run == validated.config_sha256[:12]
    assert validated.config.search_space.gpu_budget == 32
    assert validated.catalog.perf_db_versions["vllm"]
    assert validated.versions["ai-dynamo"] == "1.5.1" and validated.versions["aiconfigurator-core"] == "0.12.0"
    out = tmp_path / "config.json"
    write_model(out, validated)
    assert read_model(out, ValidatedConfig) == validated
    assert not list(tmp_path.glob(".config.json.*"))  # no temporary left behind


def test_same_meaning_same_hash_and_any_change_a_new_one(tmp_path):
    explicit = config_data(search_space={"gpu_budget": 32, "prefill_block_size": 64})
    a = build_validated_config(write_yaml(tmp_path, config_data(), "a.yaml"))
    b = build_validated_config(write_yaml(tmp_path, explicit, "b.yaml"))
    c = build_validated_config(write_yaml(tmp_path, config_data(search_space={"gpu_budget": 16}), "c.yaml"))
    assert a.config_sha256 == b.config_sha256 != c.config_sha256


def test_mtp_drafts_are_refused_by_path_for_a_model_without_an_mtp_head(tmp_path):
    no_head = config_data(search_space={"model_name": "Qwen/Qwen3-30B-A3B", "decode_nextn": [0, 2]})
    with pytest.raises(ConfigError) as caught:
        build_validated_config(write_yaml(tmp_path, no_head, "qwen.yaml"))
    ((where, message),) = caught.value.problems
    assert where == "search_space.decode_nextn" and message.startswith("[0, 2]: multi-token prediction")
    assert "Qwen/Qwen3-30B-A3B has none" in message and "num_nextn_predict_layers 0" in message
    assert message.endswith("allowed: [0]")
    head = config_data(search_space={"model_name": "deepseek-ai/DeepSeek-V3", "decode_nextn": [0, 2]})
    drafting = build_validated_config(write_yaml(tmp_path, head, "deepseek.yaml"))
    assert drafting.config.search_space.nextn_accept_rates == [0.85, 0.3]
    # Nothing drafted: the run id of before MTP was searched (the knob replaced one global aic_nextn, unset).
    plain = build_validated_config(write_yaml(tmp_path, config_data(), "plain.yaml"))
    explicit = build_validated_config(write_yaml(tmp_path, config_data(search_space={"agg_nextn": [0]}), "zero.yaml"))
    assert plain.run == explicit.run != drafting.run


def test_hash_follows_trace_content_not_its_location(tmp_path):
    def trace_config(folder, text):
        folder.mkdir()
        (folder / "t.jsonl").write_text(text)
        data = config_data(workload={"isl": None, "osl": None, "request_rate": None, "num_request_ratio": None})
        data["workload"]["trace_path"] = "t.jsonl"
        return build_validated_config(write_yaml(folder, data))

    text = "".join(TRACE.read_text().splitlines(keepends=True)[:5])
    here, there = trace_config(tmp_path / "x", text), trace_config(tmp_path / "y", text)
    edited = trace_config(tmp_path / "z", text + text.splitlines(keepends=True)[0])
    assert here.config_sha256 == there.config_sha256 != edited.config_sha256
    assert here.inputs.trace_sha256 and here.inputs.trace_file.endswith("x/t.jsonl")


def test_run_name_override_and_its_rules(tmp_path):
    path = write_yaml(tmp_path, config_data())
    assert build_validated_config(path, run="my-sweep_1").run == "my-sweep_1"
    with pytest.raises(ConfigError, match="run name"):
        build_validated_config(path, run="../escape")


def test_catalog_problems_and_schema_problems_are_one_error(tmp_path):
    path = write_yaml(tmp_path, config_data(search_space={"hardware_sku": "h900", "model_name": "nobody/none"}))
    with pytest.raises(ConfigError) as caught:
        build_validated_config(path)
    assert {p for p, _ in caught.value.problems} == {"search_space.hardware_sku", "search_space.model_name"}


def test_policy_dead_end_fails_validation(tmp_path):
    path = write_yaml(tmp_path, config_data(search_space={"planner_scaling_policy": ["throughput_180_5"]}))
    with pytest.raises(ConfigError, match="scales on throughput"):
        build_validated_config(path)


def test_prepare_run_refuses_to_mix_configs_in_one_run(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    first = write_yaml(tmp_path, config_data(), "first.yaml")
    layout = prepare_run(str(first), run="shared")
    write_model(layout.config_json, build_validated_config(first, "shared"))
    assert prepare_run(str(first), run="shared").config_json == "results/shared/config.json"
    second = write_yaml(tmp_path, config_data(search_space={"gpu_budget": 4}), "second.yaml")
    with pytest.raises(ConfigError, match="different config"):
        prepare_run(str(second), run="shared")


def run_folder_of(tmp_path, run, change):
    """A run folder whose config.json is the config's as `change` makes it (validated -> its update); the config's
    path, the folder's layout and its validated config as written now."""
    path = write_yaml(tmp_path, config_data())
    layout = prepare_run(str(path), run=run)
    validated = build_validated_config(path, run)
    write_model(layout.config_json, validated.model_copy(update=change(validated)))
    return path, layout, validated


def test_prepare_run_refuses_to_resume_a_run_folder_of_an_older_layout(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path, _, _ = run_folder_of(tmp_path, "old", lambda validated: {"schema_version": 1})
    with pytest.raises(ConfigError, match="older Spica .* version 1"):
        prepare_run(str(path), run="old")


def test_prepare_run_refuses_to_resume_with_another_simulator_naming_the_versions(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    older = lambda validated: {"versions": {**validated.versions, "ai-dynamo": "1.4.0"}}  # noqa: E731
    path, layout, validated = run_folder_of(tmp_path, "upgraded", older)
    with pytest.raises(ConfigError, match=r"ai-dynamo 1\.4\.0 \(here 1\.5\.1\)"):
        prepare_run(str(path), run="upgraded")
    write_model(layout.config_json, validated)
    assert prepare_run(str(path), run="upgraded").run == "upgraded"  # same versions: resumes


def test_locate_config_prefers_explicit_then_configfile_then_default(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "x.yaml").touch()
    assert locate_config({"spica": "x.yaml"}, ["other.yaml"]) == "x.yaml"
    assert locate_config({}, [str(tmp_path / "x.yaml")]) == "x.yaml"  # same file, same spelling
    assert locate_config({}, []) == "config/default.yaml"
    outside = os.path.abspath("/tmp")
    assert locate_config({"spica": outside}, []) == outside


def test_config_json_is_plain_json(tmp_path):
    validated = build_validated_config(write_yaml(tmp_path, config_data()))
    data = json.loads(validated.model_dump_json())
    assert data["config"]["sweep"]["algorithm"] == "nsga2"
