"""KV capacity from the real aiconfigurator memory estimator."""

import pytest

from spica_lib.facts.catalog import resolve_backend_version
from spica_lib.facts.kv_capacity import MEMORY_FRACTION_KIND, KvEstimateError, KvEstimator, KvSettings, NoPerfDatabase
from spica_lib.facts.parallel import ParallelShape

pytestmark = pytest.mark.slow
DEFAULT = KvSettings(max_num_tokens=8192, memory_fraction=0.9)


def estimator(model="Qwen/Qwen3-32B", sku="h200_sxm", backends=("vllm", "sglang", "trtllm")):
    return KvEstimator(model, sku, {b: resolve_backend_version(sku, b) for b in backends})


def test_fraction_kind_per_backend():
    assert MEMORY_FRACTION_KIND == {"vllm": "of_total", "sglang": "of_total", "trtllm": "of_free"}


def test_qwen3_32b_vllm_tokens_per_rank_match_the_estimator():
    kv = estimator()
    tokens = [kv.estimate(ParallelShape(tp=tp), "vllm", DEFAULT).tokens_per_rank for tp in (1, 2, 4)]
    assert tokens == [249_864, 751_550, 1_755_323]


def test_each_distinct_query_is_estimated_once():
    kv = estimator()
    for _ in range(3):
        kv.estimate(ParallelShape(tp=2), "vllm", DEFAULT)
    assert kv.calls == 1
    kv.estimate(ParallelShape(tp=2), "vllm", KvSettings(max_num_tokens=16384))
    kv.estimate(ParallelShape(tp=2), "sglang", DEFAULT)
    assert kv.calls == 3


def test_more_batched_tokens_leave_less_kv():
    kv = estimator()
    small = kv.estimate(ParallelShape(tp=1), "vllm", DEFAULT).tokens_per_rank
    large = kv.estimate(ParallelShape(tp=1), "vllm", KvSettings(max_num_tokens=32768)).tokens_per_rank
    assert large < small


def test_trtllm_tp2_has_capacity():
    assert estimator().estimate(ParallelShape(tp=2), "trtllm", DEFAULT).tokens_per_rank > 0


def test_model_that_does_not_fit_is_infeasible_not_zero():
    kv = estimator("deepseek-ai/DeepSeek-V3", "gb200", ("trtllm",))
    result = kv.estimate(ParallelShape(tp=2, moe_ep=2), "trtllm", DEFAULT)
    assert result.tokens_per_rank is None and "GiB" in result.reason


def test_other_estimator_errors_are_raised_with_the_shape():
    with pytest.raises(KvEstimateError, match="tp3"):
        estimator().estimate(ParallelShape(tp=3), "vllm", DEFAULT)


def test_missing_perf_db_is_named():
    kv = KvEstimator("Qwen/Qwen3-32B", "b60", {"trtllm": resolve_backend_version("b60", "trtllm")})
    with pytest.raises(NoPerfDatabase, match="hardware_sku=b60, backend=trtllm"):
        kv.estimate(ParallelShape(tp=1), "trtllm", DEFAULT)
