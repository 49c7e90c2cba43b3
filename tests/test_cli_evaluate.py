"""`spica evaluate`: one hand-written candidate through the real replay."""

import json

import pytest
from conftest import REPO

from spica_lib.cli.main import main

pytestmark = pytest.mark.slow
DEFAULT = str(REPO / "config" / "default.yaml")


def test_evaluate_prints_metrics(capsys):
    candidate = json.dumps({"deployment_mode": "agg", "backend": "vllm", "parallel": {"tp": 2, "replicas": 4}})
    assert main(["evaluate", DEFAULT, "--candidate", candidate]) == 0
    out = capsys.readouterr().out
    assert "4xtp2 on vllm (agg): feasible" in out and "goodput_output_throughput_tok_s" in out and "average_gpus" in out


def test_evaluate_from_a_yaml_file_as_json(tmp_path, capsys):
    path = tmp_path / "cand.yaml"
    path.write_text(
        "deployment_mode: disagg\nbackend: vllm\nparallel:\n  prefill: {tp: 1, replicas: 2}\n  decode: {tp: 4}\n"
    )
    assert main(["evaluate", DEFAULT, "--candidate", str(path), "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["result"]["status"] == "feasible" and record["spec"]["sample"]["used_gpus"] == 6


def test_bad_candidate_exits_2_naming_the_field(capsys):
    candidate = json.dumps({"deployment_mode": "agg", "parallel": {"tp": 2}, "agg_max_num_seqs": 0})
    assert main(["evaluate", DEFAULT, "--candidate", candidate]) == 2
    err = capsys.readouterr().err
    assert "invalid candidate" in err and "candidate.agg_max_num_seqs" in err and "whole number >= 1" in err


def test_failing_candidate_exits_1_with_the_reason(capsys):
    candidate = json.dumps({"deployment_mode": "agg", "parallel": {"tp": 3}})
    assert main(["evaluate", DEFAULT, "--candidate", candidate]) == 1
    assert "failed" in capsys.readouterr().out
