"""`spica pools`: pool sizes per mode and backend, and why anything was dropped."""

import pytest
from conftest import REPO, config_data, write_yaml

from spica_lib.cli.main import main

pytestmark = pytest.mark.slow


def test_pools_report_sizes(capsys):
    assert main(["pools", str(REPO / "config" / "default.yaml")]) == 0
    out = capsys.readouterr().out
    assert "agg     ready: 15 layouts (vllm 15, sglang 15)" in out and "disagg  ready:" in out


def test_pools_report_left_out_backends_and_dropped_shapes(tmp_path, capsys):
    data = config_data(
        search_space={"backend": ["vllm", "trtllm"], "gpu_budget": 16, "model_name": "Qwen/Qwen3-235B-A22B"}
    )
    assert main(["pools", str(write_yaml(tmp_path, data))]) == 0
    out = capsys.readouterr().out
    assert "backend trtllm left out: ai-dynamo 1.5.1's replay does not support TRT-LLM disaggregation" in out
    assert "dropped: does not fit in GPU memory" in out
    # Disaggregated attention-DP layouts are counted out with the replay's reason, not silently.
    assert "disagg/vllm: " in out and "enumerated layouts left out, as they use attention DP in a role" in out


def test_pools_exit_2_when_nothing_fits(tmp_path, capsys):
    data = config_data(search_space={"model_name": "deepseek-ai/DeepSeek-V3", "gpu_budget": 2})
    assert main(["pools", str(write_yaml(tmp_path, data))]) == 2
    assert "raise search_space.gpu_budget" in capsys.readouterr().err
