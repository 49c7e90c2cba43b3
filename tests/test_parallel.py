"""Pure enumeration of worker shapes, replica configs and disagg pairs."""

from spica_lib.facts.parallel import (
    DisaggConfig,
    ParallelShape,
    ReplicaConfig,
    enumerate_disagg_configs,
    enumerate_parallel_configs,
    enumerate_worker_shapes,
    parse_pinned_config,
)


def strategies(shapes):
    return sorted(shape.strategy for shape in shapes)


def test_dense_is_plain_tensor_parallel():
    assert enumerate_worker_shapes(4, False, "vllm") == [ParallelShape(tp=4)]
    assert enumerate_worker_shapes(4, False, "vllm")[0].strategy == "tp"


def test_moe_at_four_gpus_has_the_four_pure_patterns():
    shapes = enumerate_worker_shapes(4, True, "vllm")
    assert strategies(shapes) == ["dep", "dtp", "tep", "tp"]
    assert ParallelShape(tp=4, moe_ep=4) in shapes and ParallelShape(tp=1, attention_dp=4, moe_ep=4) in shapes
    assert ParallelShape(tp=4, moe_tp=4) in shapes and ParallelShape(tp=1, attention_dp=4, moe_tp=4) in shapes


def test_without_pure_moe_tp_only_tep_and_dep_remain():
    assert strategies(enumerate_worker_shapes(4, True, "vllm", allow_moe_pure_tp=False)) == ["dep", "tep"]
    assert enumerate_worker_shapes(4, False, "vllm", allow_moe_pure_tp=False) == [ParallelShape(tp=4)]
    configs = enumerate_parallel_configs(8, True, "trtllm", allow_moe_pure_tp=False)
    assert {c.shape.strategy for c in configs} == {"tep", "dep"}
    pairs = enumerate_disagg_configs(8, True, "trtllm", allow_moe_pure_tp=False)
    assert {p.prefill.shape.strategy for p in pairs} == {"tep", "dep"}


def test_sglang_ep_only_kernels_drop_moe_tp():
    assert strategies(enumerate_worker_shapes(4, True, "sglang")) == ["dep", "dtp", "tep", "tp"]
    for kernel in ("deepep_moe", "megamoe"):
        assert strategies(enumerate_worker_shapes(4, True, "sglang", moe_backend=kernel)) == ["dep", "tep"]
    assert strategies(enumerate_worker_shapes(4, True, "sglang", moe_backend="cutlass_moe")) == [
        "dep",
        "dtp",
        "tep",
        "tp",
    ]
    assert strategies(enumerate_worker_shapes(4, True, "trtllm")) == ["dep", "dtp", "tep", "tp"]


def test_moe_needs_two_gpus_per_worker():
    assert enumerate_worker_shapes(1, True, "vllm") == []


def test_dense_replicas_within_budget():
    configs = enumerate_parallel_configs(8, False, "vllm")
    by_width = {}
    for config in configs:
        by_width.setdefault(config.shape.gpus, []).append(config.replicas)
    assert by_width == {1: list(range(1, 9)), 2: [1, 2, 3, 4], 4: [1, 2], 8: [1]}
    assert len(configs) == 15


def test_minimum_worker_width_and_minimum_budget():
    assert {c.shape.gpus for c in enumerate_parallel_configs(8, False, "vllm", min_gpus_per_worker=4)} == {4, 8}
    at_least_four = enumerate_parallel_configs(8, False, "vllm", min_gpu_budget=4)
    assert [c.replicas for c in at_least_four if c.shape.gpus == 2] == [2, 3, 4]
    assert all(c.total_gpus >= 4 for c in at_least_four)


def test_moe_trtllm_budget_16_includes_pure_tp():
    configs = enumerate_parallel_configs(16, True, "trtllm")
    assert any(c.shape.strategy == "tp" and c.shape.moe_tp > 1 for c in configs)
    assert max(c.shape.gpus for c in configs) == 16


def test_moe_trtllm_disagg_pairs():
    pairs = enumerate_disagg_configs(8, True, "trtllm")
    assert len(pairs) == 176
    assert all(p.prefill.total_gpus >= 2 and p.decode.total_gpus >= 2 and p.total_gpus <= 8 for p in pairs)
    assert any(p.prefill.shape != p.decode.shape for p in pairs)
    exactly = enumerate_disagg_configs(8, True, "trtllm", min_gpu_budget=8)
    assert len(exactly) == 96 and all(p.total_gpus == 8 for p in exactly)


def test_dense_disagg_is_all_tensor_parallel():
    pairs = enumerate_disagg_configs(4, False, "vllm")
    assert pairs and all(p.prefill.shape.strategy == p.decode.shape.strategy == "tp" for p in pairs)


def test_totals_and_labels():
    pair = DisaggConfig(
        prefill=ReplicaConfig(shape=ParallelShape(tp=2), replicas=2),
        decode=ReplicaConfig(shape=ParallelShape(tp=1, attention_dp=4, moe_ep=4), replicas=1),
    )
    assert pair.total_gpus == 8
    assert pair.label() == "P 2xtp2 + D 1xtp1dp4ep4"
    assert ParallelShape(tp=2, attention_dp=2, moe_tp=2, moe_ep=2).strategy == "mixed"


def test_pinned_entries_parse_to_equal_configs():
    assert parse_pinned_config({"tp": 2, "replicas": 4}, "agg") == ReplicaConfig(shape=ParallelShape(tp=2), replicas=4)
    pair = parse_pinned_config({"prefill": {"tp": 1}, "decode": {"tp": 4, "replicas": 2}}, "disagg")
    assert pair.prefill.replicas == 1 and pair.decode.total_gpus == 8
    assert hash(pair) == hash(parse_pinned_config({"prefill": {"tp": 1}, "decode": {"tp": 4, "replicas": 2}}, "disagg"))
