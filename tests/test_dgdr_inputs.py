"""DGDRs as people write them (issue 68): only what the wheel requires, nulls, every problem at once by its DGDR path.

The first test is generated from the pinned wheel's own DGDR model (`dgdr_v1beta1_types`), not from a field list
typed here: every field of `DynamoGraphDeploymentRequestSpec`, nested models walked (the planner's too), is left
out, set to null and set to a value of a type it cannot take, and each request must be read or refused cleanly.
"""

from __future__ import annotations

import copy
import subprocess
from typing import Any

import pytest
from conftest import SPICA_RUN, write_yaml
from pydantic import BaseModel, TypeAdapter, ValidationError

from spica_lib.cli.main import main
from spica_lib.config import ConfigError, SmartSearchConfig
from spica_lib.config.dgdr_request import wheel_request, wheel_types
from spica_lib.config.fields import BACKENDS
from spica_lib.config.input_kind import K8S_SUBJECT
from spica_lib.config.origins import holds
from spica_lib.config.validate import check_config
from spica_lib.deploy.k8s_names import deployment_name, name_problems
from spica_lib.facts.catalog import resolve_backend_version
from spica_lib.facts.hardware import system_facts

HEADER = {"apiVersion": "nvidia.com/v1beta1", "kind": "DynamoGraphDeploymentRequest", "metadata": {"name": "qwen-chat"}}
# Every field the wheel has, given, where the request can give them all (concurrency and e2eLatency are the
# alternatives of requestRate and ttft + itl); the planner with a few of the fields the replay simulates.
FULL_SPEC: dict[str, Any] = {
    "model": "Qwen/Qwen3-32B",
    "backend": "vllm",
    "image": "nvcr.io/nvidia/ai-dynamo/dynamo-planner:1.5.1",
    "runtimeVersionOverride": "1.5.1",
    "modelCache": {"pvcName": "models", "pvcModelPath": "qwen3-32b", "pvcMountPath": "/opt/model-cache"},
    "hardware": {"gpuSku": "h200_sxm", "vramMb": system_facts("h200_sxm").vram_bytes / 2**20, "totalGpus": 8,
                 "numGpusPerNode": 8, "interconnect": "nvlink", "rdma": True},
    "workload": {"isl": 2048, "osl": 256, "requestRate": 8.0},
    "sla": {"ttft": 2000, "itl": 50, "optimizationType": "throughput"},
    "overrides": {"profilingJob": {}, "dgd": {"apiVersion": "nvidia.com/v1beta1", "kind": "DynamoGraphDeployment",
                                              "metadata": {"labels": {"team": "search"}}}},
    "features": {"planner": {"enable_throughput_scaling": False, "enable_load_scaling": True,
                             "load_adjustment_interval_seconds": 10},
                 "kvRouter": {"enabled": True}, "mocker": {"enabled": False}},
    "searchStrategy": "rapid",
    "autoApply": False,
}  # fmt: skip
WRONG_CANDIDATES = ({"not": "this"}, ["not", "this"], "not-this")


def wheel_fields(model: type[BaseModel], prefix: tuple[str, ...] = ("spec",), seen: tuple = ()):
    """(path, field) of every field of the wheel's model, nested models walked (each once on a path)."""
    for name, field in model.model_fields.items():
        path = (*prefix, name)
        yield path, field
        inner = _model_in(field.annotation)
        if inner is not None and inner not in seen:
            yield from wheel_fields(inner, path, (*seen, inner))


def _model_in(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    return next((m for m in map(_model_in, getattr(annotation, "__args__", ())) if m is not None), None)


def wrong_value(annotation: Any) -> Any:
    """A value of a type the annotation cannot take, as the wheel's own type adapter judges it."""
    adapter = TypeAdapter(annotation)
    for candidate in WRONG_CANDIDATES:
        try:
            adapter.validate_python(candidate)
        except ValidationError:
            return candidate
    raise AssertionError(f"{annotation} takes every candidate; add one it refuses")


FIELDS = dict(wheel_fields(wheel_types().DynamoGraphDeploymentRequestSpec))
UNSET = object()


def request(spec: dict[str, Any], path: tuple[str, ...] = (), value: Any = UNSET) -> dict[str, Any]:
    """The request with `spec`, the field at `path` (under spec) set to `value`, or left out when UNSET."""
    data = {**copy.deepcopy(HEADER), "spec": copy.deepcopy(spec)}
    if not path:
        return data
    holder = data["spec"]
    for key in path[:-1]:
        holder = holder.setdefault(key, {})
    if value is UNSET:
        holder.pop(path[-1], None)
    else:
        holder[path[-1]] = value
    return data


def outcome(folder, data: dict[str, Any]) -> tuple[str, Any]:
    """("read", the config without its dgdr block) or ("refused", the problems); anything else raises."""
    try:
        config, _ = check_config(write_yaml(folder, data))
    except ConfigError as refused:
        assert refused.problems and all(isinstance(m, str) and m for _, m in refused.problems), refused.problems
        return "refused", refused.problems
    return "read", config.model_dump(mode="json", exclude={"dgdr"})


def refused_at(result: tuple[str, Any], path: str) -> bool:
    """Whether the request was refused with a problem at `path`, inside it, or at a field that holds it."""
    kind, problems = result
    named = [where.split(" ")[0] for where, _ in problems] if kind == "refused" else []
    return any(holds(where, path) or holds(path, where) for where in named)


def nested(spec: dict[str, Any], path: tuple[str, ...]) -> Any:
    holder: Any = spec
    for key in path:
        if not isinstance(holder, dict) or key not in holder:
            return UNSET
        holder = holder[key]
    return holder


def test_the_request_with_every_field_is_read(tmp_path):
    kind, config = outcome(tmp_path, request(FULL_SPEC))
    assert kind == "read", config
    assert config["search_space"]["router_mode"] == ["kv_router"] and config["workload"]["request_rate"] == 8.0


@pytest.mark.parametrize("path", list(FIELDS), ids=[".".join(path) for path in FIELDS])
def test_every_wheel_field_left_out_null_or_of_a_wrong_type_is_read_or_refused_by_its_path(path, tmp_path):
    field, where, keys = FIELDS[path], ".".join(path), path[1:]  # keys: under spec
    parent_given = isinstance(nested(FULL_SPEC, keys[:-1]), dict)
    left_out = outcome(tmp_path, request(FULL_SPEC, keys))
    if parent_given and field.is_required():
        assert refused_at(left_out, where), left_out  # what the wheel requires: refused by its path
    null = outcome(tmp_path, request(FULL_SPEC, keys, None))
    try:
        wheel_request({"spec": request(FULL_SPEC, keys, None)["spec"]})
        wheel_takes_null = True
    except ValidationError:
        wheel_takes_null = False
    if wheel_takes_null and parent_given:
        assert null == left_out  # a null is the field's default: the same config, or the same refusal
    elif not wheel_takes_null:
        assert refused_at(null, where), null  # the wheel refuses a null here, and Spica names the field
    wrong = outcome(tmp_path, request(FULL_SPEC, keys, wrong_value(field.annotation)))
    assert refused_at(wrong, where), wrong  # a value of the wrong type: refused by its path


# The requests of the "Done when", each written with only what it says.
MINIMAL: dict[str, Any] = {"model": "Qwen/Qwen3-32B", "hardware": {"gpuSku": "h200_sxm", "totalGpus": 8}}
LOAD = {"isl": 2048, "osl": 256, "requestRate": 8.0}
DONE_WHEN = {
    "only model and hardware": ({}, MINIMAL),
    "no backend or searchStrategy": ({}, {**MINIMAL, "workload": LOAD, "sla": {"ttft": 2000, "itl": 50}}),
    "an e2eLatency SLA": ({}, {**MINIMAL, "workload": LOAD, "sla": {"e2eLatency": 8000}}),
    "thorough, the KV router and labels": (
        {"labels": {"team": "search", "app.kubernetes.io/name": "qwen-chat"}},
        {**MINIMAL, "searchStrategy": "thorough", "features": {"kvRouter": {"enabled": True}}},
    ),
}  # fmt: skip


def done_when(case: str) -> dict[str, Any]:
    metadata, spec = DONE_WHEN[case]
    return {**request(spec), "metadata": {"name": "qwen-chat", **metadata}}


@pytest.mark.parametrize("case", DONE_WHEN)
def test_a_request_written_with_only_what_it_says_validates_and_dry_runs(case, tmp_path, capsys):
    path = write_yaml(tmp_path, done_when(case))
    assert main(["validate", str(path)]) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert ": valid" in out
    assert "metadata.name qwen-chat -> the DynamoGraphDeployment of each rank, qwen-chat-<rank>" in out
    config = SmartSearchConfig.from_yaml(path)
    usable = [b for b in BACKENDS if resolve_backend_version("h200_sxm", b)]
    assert list(config.search_space.backend) == usable  # `auto`, the wheel's default, as a string
    if "workload" not in done_when(case)["spec"]:  # the wheel's defaults, and its maximum-throughput case
        assert (config.workload.isl, config.workload.osl, config.workload.kv_load_ratio) == (4000, 1000, 1.0)
        assert (config.goal.sla.ttft_ms, config.goal.sla.itl_ms) == (2000, 30)
    if case == "an e2eLatency SLA":
        assert config.goal.sla.e2e_ms == 8000 and config.goal.sla.ttft_ms is None
    if case == "thorough, the KV router and labels":
        assert (config.sweep.max_rounds, config.sweep.candidates_per_round) == (20, 16)
        assert config.search_space.router_mode == ["kv_router"]
        assert "metadata.labels ['app.kubernetes.io/name', 'team'] -> metadata.labels of every" in out
    else:
        assert "spec.searchStrategy rapid (not given) -> sweep.max_rounds 3" in out
    done = subprocess.run([*SPICA_RUN, str(path), "--cores", "1", "-n"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert "This was a dry-run" in done.stdout + done.stderr and not (tmp_path / "results").exists()


def test_explicit_nulls_are_the_defaults_and_the_mapping_says_null(tmp_path):
    given = request({**MINIMAL, "workload": {"isl": None, "osl": 512}, "sla": {"ttft": None, "itl": None},
                     "features": None, "backend": "auto"})  # fmt: skip
    left_out = request({**MINIMAL, "workload": {"osl": 512}, "backend": "auto"})
    assert outcome(tmp_path, given) == outcome(tmp_path, left_out)
    notes = SmartSearchConfig.from_yaml(write_yaml(tmp_path, given)).dgdr.mapping
    assert "spec.workload.isl (null) -> workload.isl 4000: Dynamo's default" in notes
    assert "spec.sla.ttft (null) -> goal.sla.ttft_ms 2000: Dynamo's default" in notes


def test_a_null_the_wheel_refuses_is_refused_by_its_path(tmp_path):
    kind, problems = outcome(tmp_path, request({**MINIMAL, "backend": None, "searchStrategy": None}))
    assert kind == "refused" and [path for path, _ in problems] == ["spec.backend", "spec.searchStrategy"]
    assert "'auto', 'sglang', 'trtllm' or 'vllm' (got None)" in problems[0][1]


def test_four_bad_numbers_get_four_messages_each_by_its_dgdr_path(tmp_path):
    spec = {**MINIMAL, "hardware": {"gpuSku": "h200_sxm", "totalGpus": -8},
            "workload": {"isl": -1, "osl": -2, "requestRate": -3.0}}  # fmt: skip
    with pytest.raises(ConfigError) as caught:
        check_config(write_yaml(tmp_path, request(spec)))
    assert [path.split(" ")[0] for path, _ in caught.value.problems] == [
        "spec.hardware.totalGpus", "spec.workload.isl", "spec.workload.osl", "spec.workload.requestRate"
    ]  # fmt: skip
    assert "spec.workload.requestRate (as workload.request_rate): must be positive, got -3.0" in str(caught.value)
    assert "(in the config Spica mapped the DGDR onto)" not in str(caught.value)


def test_every_problem_of_every_step_is_said_once_in_one_pass(tmp_path):
    """An unknown key (Spica's check), a value of the wrong type (the wheel), a GPU budget (the mapping), a negative
    length (the mapped config) and a bad label (the metadata): five problems, none said twice."""
    data = request({**MINIMAL, "hardware": {"gpuSku": "h200_sxm", "totalGpus": 0},
                    "workload": {"isl": "long", "osl": -2, "concurrency": 8},
                    "sla": {"ttft": 500, "itl": 20, "tfft": 1}})  # fmt: skip
    data["metadata"]["labels"] = {"version": 2}
    with pytest.raises(ConfigError) as caught:
        check_config(write_yaml(tmp_path, data))
    paths = [path.split(" ")[0] for path, _ in caught.value.problems]
    assert sorted(paths) == sorted(["metadata.labels.version", "spec.sla.tfft", "spec.workload.isl",
                                    "spec.hardware.totalGpus", "spec.workload.osl"]), caught.value.problems  # fmt: skip
    assert str(caught.value).startswith("invalid DynamoGraphDeploymentRequest")


def test_a_refused_field_is_not_said_again_by_what_the_mapping_or_the_config_find_inside_it(tmp_path):
    data = request({**MINIMAL, "hardware": {"gpuSku": "t4", "totalGpus": 8}, "workload": {"concurrency": 0.5}})
    with pytest.raises(ConfigError) as caught:
        check_config(write_yaml(tmp_path, data))
    assert [path for path, _ in caught.value.problems] == ["spec.hardware.gpuSku", "spec.workload.concurrency"]


def test_the_metadata_is_checked_as_the_api_server_checks_it(tmp_path):
    data = request(MINIMAL)
    data["metadata"] = {"name": "Qwen_Chat", "namespace": "team.a", "labels": {"tier": True, "bad key": "x"},
                        "annotations": {"note": 3}, "uid": "x"}  # fmt: skip
    with pytest.raises(ConfigError) as caught:
        check_config(write_yaml(tmp_path, data))
    problems = dict(caught.value.problems)
    assert set(problems) == {"metadata.uid", "metadata.name", "metadata.namespace", "metadata.labels.tier",
                             "metadata.labels.bad key", "metadata.annotations.note"}  # fmt: skip
    assert "Kubernetes takes strings only: quote it (tier: \"True\")" in problems["metadata.labels.tier"]
    plain = request(MINIMAL)
    plain["metadata"] = {"name": "qwen.chat", "labels": None, "annotations": {"owner": "ml", "spica.dev/sweep": "{}"}}
    notes = SmartSearchConfig.from_yaml(write_yaml(tmp_path, plain)).dgdr.mapping
    assert "metadata.annotations ['owner'] -> not read: they annotate the request, not the deployments" in notes


def test_a_kubernetes_document_of_another_kind_is_named_as_one(tmp_path):
    data = {**request(MINIMAL), "kind": "DynamoGraphDeployment"}
    with pytest.raises(ConfigError) as caught:
        check_config(write_yaml(tmp_path, data))
    assert caught.value.subject == K8S_SUBJECT and str(caught.value).startswith("invalid Kubernetes document")
    assert caught.value.problems[0][0] == "kind" and "Spica writes DynamoGraphDeployments itself" in str(caught.value)


def test_the_request_s_name_names_each_rank_s_deployment_within_kubernetes_limits():
    assert [deployment_name("c0ffee123456", rank, "default", request="qwen-chat") for rank in (1, 2)] == [
        "qwen-chat-1", "qwen-chat-2"
    ]  # fmt: skip
    assert deployment_name("c0ffee123456", 1, "default") == "spica-c0ffee123456-1"  # a run's own: as before
    odd = "models.team-a." + "x" * 80  # a valid request name, but no DNS label, and too long for the operator
    names = [deployment_name("r", rank, "team-a", request=odd) for rank in (1, 2)]
    assert names[0] != names[1] and all(name.endswith(f"-{rank}") for name, rank in zip(names, (1, 2)))
    assert all(name_problems(name, "team-a", ["frontend", "worker", "prefill", "decode", "planner"]) == []
               for name in names)  # fmt: skip
    dotted, dashed = (deployment_name("r", 1, "team-a", request=name) for name in ("qwen.chat", "qwen-chat"))
    assert dotted != dashed  # a name made a DNS label carries a hash of the exact name


@pytest.mark.parametrize(
    "metadata, path",
    [
        ("qwen-chat", "metadata"),
        (["qwen-chat"], "metadata"),
        ({"name": 5}, "metadata.name"),
        ({"labels": ["team"]}, "metadata.labels"),
        ({"labels": {1: "x"}}, "metadata.labels.1"),
        ({"annotations": ["note"]}, "metadata.annotations"),
        ({"annotations": {"spica.dev/sweep": 5}}, "metadata.annotations.spica.dev/sweep"),
    ],
)
def test_metadata_of_any_shape_is_read_or_refused_by_its_path(metadata, path, tmp_path):
    kind, problems = outcome(tmp_path, {**request(MINIMAL), "metadata": metadata})
    assert kind == "refused" and path in [where for where, _ in problems], problems
