"""A DGDR's answer: deployment files with its overrides and node size, and deploy/dgdr.yaml with its status.

The last test runs the shipped example end to end (`spica run`), its sweep shrunk by Spica's own sweep
annotation, and checks its deploy/dgdr.yaml against the wheel's types and its selected deployment as a
cluster would (deploy/k8s_check.py).
"""

from __future__ import annotations

import json

import pytest
import yaml
from conftest import REPO, search_only, sweep
from test_deploy_files import trial_record, written

from spica_lib.config.dgdr import DgdrSource
from spica_lib.config.dgdr_request import request_problems, wheel_request
from spica_lib.deploy.dgd import GPU, components_by_role, main_container
from spica_lib.deploy.dgdr_status import DGDR_FILE, write_dgdr_status
from spica_lib.deploy.k8s_check import document_problems
from spica_lib.facts.parallel import ParallelShape, ReplicaConfig

pytestmark = pytest.mark.slow

EXAMPLE = REPO / "config" / "examples" / "dgdr.yaml"
OVERRIDE = {
    "apiVersion": "nvidia.com/v1beta1",
    "kind": "DynamoGraphDeployment",
    "metadata": {"labels": {"team": "search"}},
    "spec": {"components": [
        {"name": "worker", "podTemplate": {"spec": {"containers": [
            {"name": "main", "env": [{"name": "HF_HUB_OFFLINE", "value": "1"}]}]}}},
        {"name": "prefill", "podTemplate": {"metadata": {"labels": {"role": "prefill"}}}},
    ]},
}  # fmt: skip


def from_dgdr(config, override=None):
    """The config as if mapped from the example DGDR (with `override` as its overrides.dgd)."""
    request = yaml.safe_load(EXAMPLE.read_text())
    if override is not None:
        request["spec"]["overrides"] = {"dgd": override}
    return config.model_copy(update={"dgdr": DgdrSource(request=request, mapping=[], origins={})})


def test_the_override_is_merged_into_the_files_by_component_name_and_a_missing_component_is_left_out(tmp_path):
    config, record = trial_record()
    files, documents, _ = written(tmp_path, record, from_dgdr(config, OVERRIDE))
    dgd = documents[0]
    assert dgd["metadata"]["labels"] == {"team": "search"} and document_problems(dgd) == []
    worker = components_by_role(dgd)["agg"]
    assert {"name": "HF_HUB_OFFLINE", "value": "1"} in main_container(worker)["env"]
    assert [c["name"] for c in dgd["spec"]["components"]] == ["frontend", "worker"]  # no prefill in an agg deployment
    assert files.differences == []  # nothing replayed was changed


def test_the_deployment_of_a_request_named_qwen_chat_carries_its_name_and_its_labels(tmp_path):
    """Every name starts with the request's, per rank; its labels go with it, under those of overrides.dgd."""
    config, record = trial_record()
    request = yaml.safe_load(EXAMPLE.read_text())
    request["metadata"] = {"name": "qwen-chat", "labels": {"team": "chat", "tier": "gold"}}
    request["spec"]["overrides"] = {"dgd": OVERRIDE}  # its labels: {team: search}
    asked = config.model_copy(update={"dgdr": DgdrSource(request=request, mapping=[], origins={})})
    files, documents, jobs = written(tmp_path, record, asked, rank=2)
    dgd = documents[0]
    assert dgd["metadata"]["name"] == files.name == "qwen-chat-2" and document_problems(dgd) == []
    assert dgd["metadata"]["labels"] == {"team": "search", "tier": "gold"}
    assert jobs and all(job["metadata"]["name"].startswith("qwen-chat-2-") for job in jobs)
    assert "Every name starts with `qwen-chat-2`" in (tmp_path / "2" / "README.md").read_text()


def test_the_node_size_splits_a_worker_over_nodes_and_is_the_system_s_when_not_given(tmp_path):
    # One default for the node, the system file's (search_space.node_gpus): GB200's nodes hold 4 GPUs, so a TP8
    # worker spans two of them whether or not the config says so, as it does on SLURM; H200's hold 8.
    layout = ReplicaConfig(shape=ParallelShape(tp=8))
    for name, sku, node in (("default", "gb200", None), ("four", "gb200", 4), ("h200", "h200_sxm", None)):
        config, record = trial_record(layout=layout, hardware_sku=sku, **({"gpus_per_node": node} if node else {}))
        files, documents, _ = written(tmp_path / name, record, config)
        worker = components_by_role(documents[0])["agg"]
        limit, nodes = ("8", None) if sku == "h200_sxm" else ("4", {"nodeCount": 2})
        assert main_container(worker)["resources"]["limits"][GPU] == limit and worker.get("multinode") == nodes, name
        assert files.gpus_per_node == (8 if sku == "h200_sxm" else 4)
        assert all(document_problems(document) == [] for document in documents)


def test_a_node_smaller_than_the_system_s_keeps_every_worker_within_one_node():
    from conftest import build, config_data

    from spica_lib.pools.branches import enumerate_branches

    config = build(config_data(search_space={"gpu_budget": 8, "gpus_per_node": 4, "deployment_mode": ["agg"]}))
    (branch,) = enumerate_branches(config)
    assert branch.pool and max(row.config.shape.gpus for row in branch.pool) == 4
    whole = build(config_data(search_space={"gpu_budget": 8, "deployment_mode": ["agg"]}))
    assert max(row.config.shape.gpus for row in enumerate_branches(whole)[0].pool) == 8


def test_the_status_names_the_selected_deployment_and_validates_against_the_wheel_s_types(tmp_path):
    config, record = trial_record()
    _, documents, _ = written(tmp_path, record, from_dgdr(config))
    path = write_dgdr_status(from_dgdr(config), tmp_path, documents[0])
    answer = yaml.safe_load(path.read_text())
    assert answer["status"] == {"phase": "Ready", "dgdName": documents[0]["metadata"]["name"],
                                "profilingResults": {"selectedConfig": documents[0]}}  # fmt: skip
    assert request_problems(answer, status=True) == []
    assert wheel_request(answer).status.phase.value == "Ready"
    failed = yaml.safe_load(write_dgdr_status(from_dgdr(config), tmp_path, None).read_text())
    assert failed["status"] == {"phase": "Failed"}
    assert write_dgdr_status(config, tmp_path / "plain", documents[0]) is None  # a run not asked by a DGDR


def test_a_request_with_only_what_it_says_runs_and_its_dgd_carries_its_name_and_labels(tmp_path):
    """The issue's crash: no backend and no searchStrategy (the wheel's defaults are strings), here with no workload
    or SLA either (the wheel's defaults, the maximum-throughput case), thorough, the KV router and labels."""
    small = {"max_rounds": 1, "candidates_per_round": 2, "top_k": 1, "finish_samples": 0, "stress_top": 0,
             "baselines": False}  # fmt: skip
    request = {"apiVersion": "nvidia.com/v1beta1", "kind": "DynamoGraphDeploymentRequest",
               "metadata": {"name": "qwen-chat", "labels": {"team": "chat"},
                            "annotations": {"spica.dev/sweep": json.dumps(small)}},
               "spec": {"model": "Qwen/Qwen3-32B", "hardware": {"gpuSku": "h200_sxm", "totalGpus": 8},
                        "searchStrategy": "thorough", "features": {"kvRouter": {"enabled": True}}}}  # fmt: skip
    run, _ = sweep(tmp_path, request)
    dgd = next(yaml.safe_load_all((run / "deploy" / "1" / "k8s_deploy.yaml").read_text()))
    assert dgd["metadata"]["name"] == "qwen-chat-1" and dgd["metadata"]["labels"] == {"team": "chat"}
    assert document_problems(dgd) == []
    answer = yaml.safe_load((run / "deploy" / DGDR_FILE).read_text())
    assert answer["status"]["phase"] == "Ready" and answer["status"]["dgdName"] == "qwen-chat-1"
    assert request_problems(answer, status=True) == []


def test_the_example_dgdr_runs_end_to_end_and_answers_with_its_status(tmp_path):
    request = yaml.safe_load(EXAMPLE.read_text())
    small = search_only({"sweep": {"max_rounds": 1, "candidates_per_round": 2, "top_k": 1}})["sweep"]
    request["metadata"]["annotations"] = {"spica.dev/sweep": json.dumps(small)}
    run, done = sweep(tmp_path, request)
    answer = yaml.safe_load((run / "deploy" / DGDR_FILE).read_text())
    assert request_problems(answer, status=True) == []
    assert answer["spec"] == request["spec"] and answer["status"]["phase"] == "Ready"
    selected = answer["status"]["profilingResults"]["selectedConfig"]
    assert document_problems(selected) == [] and answer["status"]["dgdName"] == selected["metadata"]["name"]
    assert selected == next(yaml.safe_load_all((run / "deploy" / "1" / "k8s_deploy.yaml").read_text()))
    config = json.loads((run / "config.json").read_text())["config"]
    assert config["dgdr"]["request"]["spec"] == request["spec"] and config["dgdr"]["mapping"]
    report = (run / "report" / "report.md").read_text()
    assert "## The DynamoGraphDeploymentRequest" in report and "spec.backend auto -> search_space.backend" in report
