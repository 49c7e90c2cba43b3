"""Projection of requested layout features onto a branch's pool."""

import pytest

from spica_lib.facts.parallel import DisaggConfig, ParallelShape, ReplicaConfig
from spica_lib.search.projection import ParallelConfigProjector


def agg(tp=1, dp=1, ep=1, moe_tp=1, replicas=1):
    return ReplicaConfig(shape=ParallelShape(tp=tp, attention_dp=dp, moe_ep=ep, moe_tp=moe_tp), replicas=replicas)


MOE_POOL = [
    (agg(tp=1, dp=1, ep=1, replicas=4), ["vllm"]),  # placeholder dense-like 1-GPU engine
    (agg(tp=4, ep=4), ["vllm", "sglang"]),
    (agg(dp=4, ep=4), ["vllm"]),
    (agg(tp=16, ep=16, replicas=2), ["sglang"]),
    (agg(tp=4, moe_tp=4, replicas=2), ["vllm"]),
]


def params_by_name(projector):
    return {p.name: p for p in projector.parameters}


def test_agg_parameters_and_defaults():
    projector = ParallelConfigProjector(MOE_POOL, 32)
    params = params_by_name(projector)
    assert params["used_gpu_ratio"].kind == "float" and params["used_gpu_ratio"].default == 1.0
    engines = params["agg_num_gpus_per_engine_target"]
    assert engines.kind == "discrete" and engines.values == (1.0, 4.0, 16.0) and engines.default == 4.0
    assert params["agg_attention_mode"].values == ("tp", "dp") and params["agg_attention_mode"].default == "tp"
    assert params["agg_ffn_mode"].values == ("ep", "tp") and params["agg_ffn_mode"].default == "ep"


def test_an_exact_point_projects_to_itself():
    projector = ParallelConfigProjector(MOE_POOL, 32)
    target = agg(dp=4, ep=4)
    projection = projector.project(projector.encode(target), "vllm")
    assert projection.config == target and projection.distance == 0 and not projection.mode_projected


def test_backend_filter_comes_before_distance():
    projector = ParallelConfigProjector(MOE_POOL, 32)
    request = projector.encode(agg(tp=16, ep=16, replicas=2))
    assert projector.project(request, "sglang").config == agg(tp=16, ep=16, replicas=2)
    chosen = projector.project(request, "vllm").config
    assert chosen != agg(tp=16, ep=16, replicas=2) and "vllm" in dict(MOE_POOL)[chosen]


def test_mode_fallback_when_no_layout_has_the_requested_mode():
    pool = [(agg(tp=4, ep=4), ["vllm"]), (agg(tp=2, ep=2, replicas=2), ["vllm"]), (agg(dp=4, ep=4), ["sglang"])]
    projector = ParallelConfigProjector(pool, 8)
    projection = projector.project({"agg_attention_mode": "dp", "agg_num_gpus_per_engine_target": 4}, "vllm")
    assert projection.mode_projected and projection.config == agg(tp=4, ep=4)


def test_mode_match_beats_numeric_distance_in_disagg():
    a = DisaggConfig(prefill=agg(tp=4, ep=4, replicas=2), decode=agg(tp=8, ep=8))
    b = DisaggConfig(prefill=agg(tp=4, ep=4), decode=agg(tp=8, moe_tp=8, replicas=3))
    projector = ParallelConfigProjector([(a, ["vllm"]), (b, ["vllm"])], 32)
    request = {**projector.encode(a), "decode_ffn_mode": "tp"}
    projection = projector.project(request, "vllm")
    assert projection.config == b
    assert projection.actual["prefill_gpu_share"] == pytest.approx(4 / 28) and b.total_gpus == 28


def test_single_config_pool_has_no_parameters():
    projector = ParallelConfigProjector([(agg(tp=2, replicas=2), ["vllm"])], 8)
    assert projector.parameters == []
    assert projector.project({}, "vllm").config == agg(tp=2, replicas=2)


def test_dense_pool_exposes_no_ffn_parameter():
    projector = ParallelConfigProjector(
        [(agg(tp=1, replicas=2), ["vllm"]), (agg(tp=2), ["vllm"]), (agg(tp=4), ["vllm"])], 8
    )
    assert "agg_ffn_mode" not in params_by_name(projector) and "agg_attention_mode" not in params_by_name(projector)


def test_unknown_backend_is_an_error():
    with pytest.raises(ValueError, match="no valid parallel config"):
        ParallelConfigProjector(MOE_POOL, 32).project({}, "trtllm")
