"""One deployment, several workloads: the config's workload list, and trials scored on every workload."""

import pandas as pd
import pytest
import yaml
from conftest import TRACE, build, config_data, rejected

from spica_lib.cli.main import main
from spica_lib.config import SmartSearchConfig
from spica_lib.facts.kv_capacity import KvEstimator
from spica_lib.facts.parallel import ParallelShape, ReplicaConfig
from spica_lib.trial.evaluate import evaluate_trial, prepare_trial

VERSION = "0.24.0"
SLA = {"ttft_ms": 2000, "itl_ms": 50}
LIGHT = {"name": "night", "isl": 1024, "osl": 64, "request_rate": 2.0, "num_request_ratio": 25}
HEAVY = {"name": "day", "isl": 2048, "osl": 64, "request_rate": 6.0, "num_request_ratio": 20}


def mix(*workloads, **goal):
    data = config_data()
    data["workload"] = [dict(w) for w in workloads]
    data["goal"] = {"target": "goodput_per_gpu", "sla": SLA, **goal}
    return data


def test_a_workload_list_keeps_every_named_workload_and_the_first_as_the_primary():
    config = build(mix(LIGHT, HEAVY))
    assert [w.name for w in config.workloads] == ["night", "day"]
    assert config.workload.request_rate == 2.0 and config.workload.isl == 1024
    assert config.sweep.max_eval_seconds == pytest.approx(60 + 0.01 * 120)  # the larger workload's 120 requests
    again = build(config.model_dump(mode="json"))  # the normalised config.json reads back
    assert again == config


def test_the_json_schema_offers_a_list_of_named_workloads_under_workload():
    schema = SmartSearchConfig.model_json_schema()
    shapes = schema["properties"]["workload"]["anyOf"]
    assert {"$ref": "#/$defs/Workload"} in shapes
    assert any(shape.get("items") == {"$ref": "#/$defs/NamedWorkload"} for shape in shapes)
    assert {"name", "weight"} <= set(schema["$defs"]["NamedWorkload"]["properties"])


def test_a_trace_can_be_one_of_the_workloads():
    config = build(mix(LIGHT, {"name": "trace", "trace_path": str(TRACE)}))
    assert config.workloads[1].trace_path == str(TRACE)


@pytest.mark.parametrize(
    ("workloads", "goal", "field", "message"),
    [
        ([], {}, "", "workload is an empty list"),
        ([LIGHT, {**HEAVY, "name": "night"}], {}, "", "repeated: ['night']"),
        ([LIGHT, {**HEAVY, "weight": -1}], {"workload_score": "weighted_mean"}, "workload[1].weight", "greater than 0"),
        ([LIGHT, {**HEAVY, "weight": 2}], {}, "", "only apply with goal.workload_score: weighted_mean"),
        ([LIGHT, {**HEAVY, "name": "has space"}], {}, "workload[1].name", "should match pattern"),
        ([LIGHT, {k: v for k, v in HEAVY.items() if k != "name"}], {}, "workload[1].name", "required field is missing"),
        ([LIGHT, {**HEAVY, "request_rate": None, "kv_load_ratio": 0.5}], {}, "", "set kv_load_ratio"),
        ([LIGHT, HEAVY], {"workload_score": "median"}, "goal.workload_score", "'worst' or 'weighted_mean'"),
    ],
)
def test_bad_workload_lists_are_refused_naming_the_field(workloads, goal, field, message):
    data = mix(*workloads, **goal)
    for item in data["workload"]:
        for key in [k for k, v in item.items() if v is None]:
            del item[key]
    rejected(data, field, message)


def test_workload_score_without_a_workload_list_does_nothing_and_is_refused():
    data = config_data()
    data["goal"] = {"target": "throughput", "workload_score": "worst"}
    rejected(data, "", "but workload is a single workload")


def test_a_pareto_goal_takes_one_workload():
    data = mix(LIGHT, HEAVY)
    data["goal"] = {"target": "pareto"}
    rejected(data, "", "a 'pareto' goal takes one workload")


def single(workload, **goal):
    """The same goal on one of the workloads alone, written as a plain (unnamed) workload."""
    data = mix(workload, **goal)
    data["workload"] = {k: v for k, v in workload.items() if k not in ("name", "weight")}
    return build(data)


def spec_on(config, tp=2, replicas=1):
    selection = {
        "deployment_mode": "agg",
        "backend": "vllm",
        "router_mode": "round_robin",
        "planner_scaling_policy": "disabled",
        "agg_max_num_batched_tokens": 8192,
        "agg_max_num_seqs": 256,
    }
    layout = ReplicaConfig(shape=ParallelShape(tp=tp), replicas=replicas)
    estimator = KvEstimator("Qwen/Qwen3-32B", "h200_sxm", {"vllm": VERSION})
    return prepare_trial(config, selection, layout, backend_version=VERSION, estimator=estimator)


@pytest.mark.slow
def test_a_candidate_is_replayed_on_each_workload_and_scored_by_the_one_that_binds():
    both = build(mix(LIGHT, HEAVY))
    result = evaluate_trial(spec_on(both), max_eval_seconds=120)
    alone = {w["name"]: evaluate_trial(spec_on(single(w)), max_eval_seconds=120) for w in (LIGHT, HEAVY)}
    assert set(result.workloads) == {"night", "day"}
    for name, own in alone.items():  # each workload replayed on its own traffic, as a separate replay
        assert result.workloads[name].metrics["completed_requests"] == own.metrics["completed_requests"]
        assert result.workloads[name].score == pytest.approx(own.score)
    assert alone["night"].metrics["completed_requests"] == 50 and alone["day"].metrics["completed_requests"] == 120
    worst = min(alone, key=lambda n: alone[n].score)
    assert result.status == "feasible" and result.binding_workload == worst
    assert result.score == pytest.approx(alone[worst].score)
    assert result.metrics == result.workloads[worst].metrics

    weighted = build(mix({**LIGHT, "weight": 3}, {**HEAVY, "weight": 1}, workload_score="weighted_mean"))
    mean = evaluate_trial(spec_on(weighted), max_eval_seconds=120)
    expected = (3 * alone["night"].score + alone["day"].score) / 4
    assert mean.score == pytest.approx(expected, rel=1e-6)


@pytest.mark.slow
def test_a_candidate_that_fails_one_workloads_sla_is_infeasible_and_says_which():
    tight = build(
        mix(LIGHT, {**HEAVY, "isl": 4096, "request_rate": 40.0}, sla={"ttft_ms": 2000, "itl_ms": 200, "percentile": 99})
    )
    result = evaluate_trial(spec_on(tight, tp=1), max_eval_seconds=120)
    assert result.status == "infeasible" and result.binding_workload == "day", result.reason
    assert "workload day:" in result.reason and "workload night" not in result.reason
    assert result.workloads["night"].status == "feasible"


@pytest.mark.slow
def test_spica_evaluate_writes_one_per_request_file_per_workload(tmp_path):
    config = tmp_path / "spica.yaml"
    config.write_text(yaml.safe_dump(mix(LIGHT, HEAVY)))
    candidate = tmp_path / "candidate.yaml"
    candidate.write_text(
        yaml.safe_dump({"deployment_mode": "agg", "backend": "vllm", "parallel": {"tp": 2, "replicas": 1}})
    )
    main(["evaluate", str(config), "--candidate", str(candidate), "--per-request", str(tmp_path / "requests.parquet")])
    rows = {name: len(pd.read_parquet(tmp_path / f"requests.{name}.parquet")) for name in ("night", "day")}
    assert rows == {"night": 50, "day": 120}
