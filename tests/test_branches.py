"""Stage `branches`: pools per mode with the real perf DB, pins, skips and errors."""

import pytest
from conftest import REPO, build, config_data

from spica_lib.config import SmartSearchConfig
from spica_lib.facts.parallel import ParallelShape, ReplicaConfig
from spica_lib.pools.branches import NoViableParallelConfig, enumerate_branches
from spica_lib.pools.table import pool_frame, read_pool, write_pool

pytestmark = pytest.mark.slow


def branches_for(**search_space):
    return {b.spec.deployment_mode: b for b in enumerate_branches(build(config_data(search_space=search_space)))}


def test_default_config_has_both_branches_with_both_backends():
    branches = {
        b.spec.deployment_mode: b
        for b in enumerate_branches(SmartSearchConfig.from_yaml(REPO / "config" / "default.yaml"))
    }
    agg, disagg = branches["agg"], branches["disagg"]
    assert agg.spec.status == disagg.spec.status == "ready"
    assert agg.spec.pool_size == 15 and agg.spec.pool_size_by_backend == {"vllm": 15, "sglang": 15}
    assert all(r.config.total_gpus <= 8 for r in disagg.pool) and disagg.spec.pool_size > 0
    assert agg.spec.knob_choices["backend"] == ["vllm", "sglang"]
    assert agg.spec.backend_versions["vllm"] and agg.spec.max_seq_len == 40_960


def test_pool_kv_tokens_are_the_estimators_per_rank_numbers():
    agg = branches_for(deployment_mode=["agg"], gpu_budget=4)["agg"]
    tokens = {r.config.shape.tp: r.kv_tokens["vllm"]["agg"] for r in agg.pool if r.config.replicas == 1}
    assert tokens == {1: 249_864, 2: 751_550, 4: 1_755_323}


def test_disagg_records_kv_tokens_for_both_roles():
    disagg = branches_for(deployment_mode=["disagg"], gpu_budget=4)["disagg"]
    assert all(set(r.kv_tokens["vllm"]) == {"prefill", "decode"} for r in disagg.pool)


def test_moe_on_sglang_enumerates_only_pure_patterns():
    agg = branches_for(model_name="Qwen/Qwen3-30B-A3B", backend=["sglang"], deployment_mode=["agg"], gpu_budget=8)[
        "agg"
    ]
    assert {r.config.shape.strategy for r in agg.pool} == {"tep", "dep", "tp", "dtp"}
    assert all(r.config.shape.gpus >= 2 for r in agg.pool)
    assert agg.spec.pool_size == 28


def test_trtllm_is_left_out_of_disagg_with_its_reason_when_another_backend_runs_it():
    branches = branches_for(backend=["trtllm", "vllm"], gpu_budget=8)
    disagg = branches["disagg"]
    assert disagg.spec.status == "ready" and disagg.spec.knob_choices["backend"] == ["vllm"]
    assert [s.backend for s in disagg.spec.skipped_backends] == ["trtllm"]
    assert "TRT-LLM disaggregation" in disagg.spec.skipped_backends[0].reason
    assert branches["agg"].spec.knob_choices["backend"] == ["trtllm", "vllm"]


def test_a_listed_mode_no_backend_can_run_is_refused():
    with pytest.raises(NoViableParallelConfig, match="TRT-LLM disaggregation") as caught:
        branches_for(backend=["trtllm"], gpu_budget=8)
    assert caught.value.problems[0][0] == "search_space.deployment_mode" and "'disagg'" in caught.value.problems[0][1]


def test_large_moe_on_gb200_only_uses_wide_workers():
    config = build(
        config_data(
            search_space={
                "model_name": "deepseek-ai/DeepSeek-V3",
                "hardware_sku": "gb200",
                "backend": ["trtllm"],
                "deployment_mode": ["agg"],
                "gpu_budget": 16,
            }
        )
    )
    agg = next(b for b in enumerate_branches(config) if b.spec.deployment_mode == "agg")
    assert agg.pool and all(r.config.shape.gpus >= 4 and r.config.total_gpus <= 16 for r in agg.pool)
    assert any("GiB" in d.reason for d in agg.spec.dropped_shapes)


def test_model_too_big_for_the_budget_says_what_to_change():
    with pytest.raises(NoViableParallelConfig) as caught:
        branches_for(model_name="deepseek-ai/DeepSeek-V3", backend=["sglang"], gpu_budget=2)
    message = str(caught.value)
    assert "raise search_space.gpu_budget" in message and "agg/sglang" in message and "disagg/sglang" in message


def test_one_infeasible_mode_is_refused_with_its_reason():
    # A MoE worker needs 2 GPUs: at a budget of 2, agg runs but a disagg pair cannot be formed.
    with pytest.raises(NoViableParallelConfig) as caught:
        branches_for(model_name="Qwen/Qwen3-30B-A3B", gpu_budget=2, backend=["vllm"], context_length=4096)
    assert [path for path, _ in caught.value.problems] == ["search_space.deployment_mode"]
    assert "'disagg'" in str(caught.value) and "gpu_budget=2" in str(caught.value) and "'agg'" not in str(caught.value)


def test_pinned_configs_replace_the_menu_exactly():
    pins = [{"tp": 4, "replicas": 2}, {"tp": 2, "replicas": 1}]
    agg = branches_for(deployment_mode=["agg"], gpu_budget=8, parallel_configs=pins)["agg"]
    assert [r.config for r in agg.pool] == [
        ReplicaConfig(shape=ParallelShape(tp=4), replicas=2),
        ReplicaConfig(shape=ParallelShape(tp=2), replicas=1),
    ]
    assert agg.spec.pinned and agg.spec.pool_size == 2


def test_illegal_pin_is_an_error():
    with pytest.raises(NoViableParallelConfig, match="1xtp3"):
        branches_for(deployment_mode=["agg"], parallel_configs=[{"tp": 3}])


def test_partially_illegal_pins_are_an_error():
    with pytest.raises(NoViableParallelConfig, match="not legal and KV-feasible"):
        branches_for(deployment_mode=["agg"], gpu_budget=8, parallel_configs=[{"tp": 2}, {"tp": 8, "replicas": 2}])


def test_pins_no_backend_can_run():
    with pytest.raises(NoViableParallelConfig, match="no configured backend can run the pinned"):
        branches_for(
            deployment_mode=["disagg"],
            backend=["trtllm"],
            parallel_configs=[{"prefill": {"tp": 1}, "decode": {"tp": 1}}],
        )


def test_backend_without_perf_db_is_refused_by_name_and_order_kept():
    with pytest.raises(NoViableParallelConfig) as caught:
        branches_for(
            hardware_sku="b60", backend=["trtllm", "vllm"], deployment_mode=["agg"], gpu_budget=8, context_length=8192
        )
    assert caught.value.problems == [
        ("search_space.backend", "'trtllm' has no viable layout in any listed mode: agg/trtllm: "
         "no aiconfigurator perf database for this backend on the hardware_sku")
    ]  # fmt: skip
    both = branches_for(backend=["trtllm", "vllm"], deployment_mode=["agg"], gpu_budget=4)["agg"]
    assert both.spec.knob_choices["backend"] == ["trtllm", "vllm"]


def test_kv_load_ratio_range_and_scalar():
    ranged = build(
        config_data(
            search_space={"deployment_mode": ["agg"], "gpu_budget": 4},
            workload={"request_rate": None, "kv_load_ratio": [0.2, 0.9]},
            goal={"target": "pareto"},
        )
    )
    spec = enumerate_branches(ranged)[0].spec
    assert spec.float_ranges == {"kv_load_ratio": (0.2, 0.9)} and "kv_load_ratio" not in spec.knob_choices
    scalar = build(
        config_data(
            search_space={"deployment_mode": ["agg"], "gpu_budget": 4},
            workload={"request_rate": None, "kv_load_ratio": 0.6},
        )
    )
    assert enumerate_branches(scalar)[0].spec.knob_choices["kv_load_ratio"] == [0.6]


def test_filtered_policies_reach_the_knobs():
    config = build(config_data(search_space={"deployment_mode": ["agg"], "gpu_budget": 2}))
    spec = enumerate_branches(config, policies=["disabled"])[0].spec
    assert (
        spec.knob_choices["planner_scaling_policy"] == ["disabled"] and "planner_fpm_sampling" not in spec.knob_choices
    )


def test_pool_table_round_trips(tmp_path):
    branches = branches_for(model_name="Qwen/Qwen3-30B-A3B", backend=["vllm", "sglang"], gpu_budget=4)
    for mode, branch in branches.items():
        path = tmp_path / mode / "pool.parquet"
        write_pool(path, branch.pool, mode, branch.spec.backends)
        assert read_pool(path, mode) == branch.pool
    frame = pool_frame(branches["disagg"].pool, "disagg", ["vllm", "sglang"])
    assert {"prefill_tp", "decode_moe_ep", "decode_strategy", "prefill_kv_tokens_vllm", "used_gpus"} <= set(
        frame.columns
    )
    assert (frame["used_gpus"] <= 4).all()


def test_disagg_pools_hold_no_attention_dp_layout_and_say_how_many_were_left_out():
    branches = branches_for(model_name="Qwen/Qwen3-30B-A3B", backend=["sglang", "vllm"], gpu_budget=8)
    disagg, agg = branches["disagg"], branches["agg"]
    assert disagg.spec.status == "ready" and disagg.spec.pool_size == 44
    assert all(r.config.prefill.shape.attention_dp == r.config.decode.shape.attention_dp == 1 for r in disagg.pool)
    assert [(x.backend, x.layouts, x.enumerated) for x in disagg.spec.replay_limited] == [
        ("sglang", 132, 176),
        ("vllm", 132, 176),
    ]
    assert "attention DP" in disagg.spec.replay_limited[0].line("disagg")
    # The limit is the disaggregated replay's: aggregated attention-DP layouts replay and stay.
    assert any(r.config.shape.attention_dp > 1 for r in agg.pool) and agg.spec.replay_limited == []


def test_pinned_layouts_the_replay_cannot_run_are_refused_with_the_reason():
    pins = [{"prefill": {"tp": 1, "attention_dp": 2, "moe_ep": 2}, "decode": {"tp": 2, "moe_ep": 2}}]
    with pytest.raises(NoViableParallelConfig, match="cannot be replayed: they use attention DP"):
        branches_for(model_name="Qwen/Qwen3-30B-A3B", deployment_mode=["disagg"], parallel_configs=pins)


def test_a_backend_whose_every_layout_the_replay_refuses_is_left_out_naming_the_limit():
    from spica_lib.facts.replay_limits import ReplayLimited
    from spica_lib.pools.branches import _empty_pool_reason
    from spica_lib.pools.build import BackendPool

    limited = ReplayLimited(backend="sglang", reason="attention DP in a role", layouts=4, enumerated=4)
    pool = BackendPool(
        mode="disagg", backend="sglang", backend_version="x", entries=[], dropped=[], enumerated=4, replay_limited=[limited]
    )
    assert _empty_pool_reason(8, pool, 40960) == "every layout uses attention DP in a role"
