"""Model and system facts from aiconfigurator."""

import pytest

from spica_lib.facts.hardware import UnknownHardware, model_facts, resolve_model_hardware, shape_problem, system_facts
from spica_lib.facts.parallel import ParallelShape

pytestmark = pytest.mark.slow


def test_deepseek_v3_is_moe_with_latent_attention():
    facts = resolve_model_hardware("deepseek-ai/DeepSeek-V3", "h200_sxm", "sglang", "0.5.14")
    assert facts.model.is_moe and facts.model.uses_mla
    assert facts.model.max_context == 163_840 and facts.model.num_experts == 256


def test_qwen3_32b_is_dense():
    facts = resolve_model_hardware("Qwen/Qwen3-32B", "h200_sxm", "vllm", "0.24.0")
    assert not facts.model.is_moe
    assert facts.model.max_context == 40_960 and facts.model.num_heads == 64
    assert 60e9 < facts.model.weight_bytes < 70e9  # 32B parameters in bf16


def test_system_facts():
    assert system_facts("h200_sxm").gpus_per_node == 8 and system_facts("gb200").gpus_per_node == 4
    assert system_facts("h200_sxm").vram_bytes > 140e9


def test_unknown_sku_lists_known_ones():
    with pytest.raises(UnknownHardware, match="h200_sxm"):
        system_facts("h900")


def test_shape_problems_caught_before_the_estimator():
    dense = model_facts("Qwen/Qwen3-32B", "h200_sxm", "vllm", "0.24.0")
    moe = model_facts("Qwen/Qwen3-30B-A3B", "h200_sxm", "vllm", "0.24.0")
    assert "tp=3" in shape_problem(ParallelShape(tp=3), dense)
    assert "pipeline" in shape_problem(ParallelShape(tp=1, pp=2), dense)
    assert "dense model" in shape_problem(ParallelShape(tp=2, moe_ep=2), dense)
    assert "must match" in shape_problem(ParallelShape(tp=2, moe_ep=4), moe)
    assert shape_problem(ParallelShape(tp=4, moe_ep=4), moe) is None
    assert shape_problem(ParallelShape(tp=8), dense) is None
