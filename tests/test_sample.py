"""Unrolling a selection and a layout into the flat sample."""

import pytest
from conftest import build, config_data, plain_selection

from spica_lib.facts.parallel import DisaggConfig, ParallelShape, ReplicaConfig
from spica_lib.trial.unroll import unroll_sample

TEP4x2 = ReplicaConfig(shape=ParallelShape(tp=4, moe_ep=4), replicas=2)


def space(**overrides):
    return build(config_data(search_space=overrides)).search_space


def selection(mode="agg", **knobs):
    return plain_selection(mode, **knobs)


def test_agg_flat_shape():
    sample = unroll_sample(space(), selection(), TEP4x2)
    assert (sample["tp"], sample["attention_dp"], sample["moe_tp"], sample["moe_ep"], sample["pp"]) == (4, 1, 1, 4, 1)
    assert sample["replicas"] == 2 and sample["strategy"] == "tep" and sample["used_gpus"] == 8
    assert sample["agg_max_num_seqs"] == 256 and sample["agg_block_size"] == 64
    assert not any(key.startswith(("prefill_", "decode_")) for key in sample)


def test_disagg_roles():
    config = DisaggConfig(
        prefill=ReplicaConfig(shape=ParallelShape(tp=4, moe_ep=4), replicas=2),
        decode=ReplicaConfig(shape=ParallelShape(tp=1, attention_dp=8, moe_ep=8), replicas=2),
    )
    sample = unroll_sample(space(), selection("disagg"), config)
    assert sample["prefill_strategy"] == "tep" and sample["decode_strategy"] == "dep"
    assert sample["prefill_replicas"] == 2 and sample["decode_attention_dp"] == 8 and sample["used_gpus"] == 24
    assert sample["decode_enable_prefix_caching"] is False and sample["prefill_max_num_seqs"] == 8
    assert "tp" not in sample and "agg_max_num_seqs" not in sample


def test_wrong_layout_kind_is_a_type_error():
    with pytest.raises(TypeError):
        unroll_sample(space(), selection("disagg"), TEP4x2)


def test_missing_searched_knob_is_a_key_error():
    with pytest.raises(KeyError):
        unroll_sample(
            space(), {"deployment_mode": "agg", "backend": "vllm", "planner_scaling_policy": "disabled"}, TEP4x2
        )


def test_disabled_policy_emits_only_the_flags():
    sample = unroll_sample(space(), selection(), TEP4x2)
    assert sample["enable_throughput_scaling"] is False and sample["enable_load_scaling"] is False
    assert "max_num_fpm_samples" not in sample and "throughput_adjustment_interval_seconds" not in sample


def test_scaling_policy_with_sampling_and_sensitivity():
    sel = selection(
        planner_scaling_policy="hybrid_180_5", planner_fpm_sampling="large", planner_load_sensitivity="aggressive"
    )
    sample = unroll_sample(space(), sel, TEP4x2)
    assert sample["throughput_adjustment_interval_seconds"] == 180 and sample["load_adjustment_interval_seconds"] == 5
    assert (sample["max_num_fpm_samples"], sample["fpm_sample_bucket_size"]) == (128, 16)
    assert (sample["load_scaling_down_sensitivity"], sample["load_min_observations"]) == (70, 3)


def test_load_predictor_winner_for_the_policy_interval():
    sel = selection(
        planner_scaling_policy="throughput_180_5", planner_fpm_sampling="default", planner_load_sensitivity="default"
    )
    sample = unroll_sample(space(), sel, TEP4x2, {180.0: "prophet_w20_log1p", 600.0: "arima_raw"})
    assert sample["load_predictor"] == "prophet" and sample["load_predictor_log1p"] is True
    assert sample["prophet_window_size"] == 20 and "kalman_q_level" not in sample
    custom = unroll_sample(space(), sel, TEP4x2, {180.0: {"load_predictor": "kalman", "kalman_q_level": 3.0}})
    assert custom["kalman_q_level"] == 3.0 and custom["kalman_min_points"] == 5


def test_load_only_policy_gets_no_predictor():
    sel = selection(
        planner_scaling_policy="load_180_5", planner_fpm_sampling="default", planner_load_sensitivity="default"
    )
    assert "load_predictor" not in unroll_sample(space(), sel, TEP4x2, {180.0: "arima_raw"})


def test_router_fields_follow_the_mode():
    rr = unroll_sample(space(router_mode=["round_robin"]), selection(overlap_score_credit=0.5), TEP4x2)
    assert rr["router_mode"] == "round_robin" and "overlap_score_credit" not in rr and "no_admission_control" not in rr
    kv_sel = selection(
        router_mode="kv_router", overlap_score_credit=0.5, prefill_load_scale=2.0, router_temperature=0.0
    )
    kv = unroll_sample(space(), kv_sel, TEP4x2)
    assert kv["overlap_score_credit"] == 0.5 and kv["prefill_load_scale"] == 2.0 and kv["no_admission_control"] is False
    assert "host_cache_hit_weight" not in kv


def test_raw_dict_composites():
    policy = {
        "enable_throughput_scaling": True,
        "enable_load_scaling": True,
        "throughput_adjustment_interval_seconds": 240,
        "load_adjustment_interval_seconds": 5,
    }
    sel = selection(
        planner_scaling_policy=policy,
        planner_fpm_sampling={"max_num_fpm_samples": 96, "fpm_sample_bucket_size": 16},
        planner_load_sensitivity={"load_scaling_down_sensitivity": 75, "load_min_observations": 4},
    )
    sample = unroll_sample(space(), sel, TEP4x2)
    assert sample["planner_scaling_policy"] == policy and sample["throughput_adjustment_interval_seconds"] == 240
    assert (
        sample["max_num_fpm_samples"],
        sample["load_scaling_down_sensitivity"],
        sample["load_min_observations"],
    ) == (96, 75, 4)
    off = {**policy, "enable_throughput_scaling": False, "enable_load_scaling": False}
    assert "max_num_fpm_samples" not in unroll_sample(space(), selection(planner_scaling_policy=off), TEP4x2)


def test_pinned_scalars_are_folded_in():
    search_space = space(gpu_budget=16, min_gpu_budget=8, min_endpoint=2, context_length=4096, startup_time=300)
    sample = unroll_sample(search_space, selection(), TEP4x2)
    assert (sample["gpu_budget"], sample["min_gpu_budget"], sample["min_endpoint"]) == (16, 8, 2)
    assert (sample["context_length"], sample["startup_time"]) == (4096, 300)
    assert "num_g2_blocks" not in sample and "kv_bytes_per_token" not in sample
    assert sample["agg_gpu_memory_utilization"] == 0.9


def test_mtp_drafts_are_in_the_sample_with_their_acceptance_and_none_leaves_the_sample_of_before():
    drafting = space(agg_nextn=[0, 2], decode_nextn=[1])
    sample = unroll_sample(drafting, selection(agg_nextn=2), TEP4x2)
    assert sample["agg_nextn"] == 2 and sample["nextn_accept_rates"] == drafting.nextn_accept_rates
    assert "aic_nextn" not in sample and "decode_nextn" not in sample  # the other mode's role is not this sample's
    plain = unroll_sample(drafting, selection(agg_nextn=0), TEP4x2)
    before = unroll_sample(space(), selection(), TEP4x2)
    assert plain == before and before["aic_nextn"] is None and list(plain) == list(before)
    assert not {"agg_nextn", "decode_nextn", "nextn_accept_rates"} & set(before)
    # `before`'s selection has no agg_nextn (as one stored before the knob existed): it takes the space's one value;
    # of several, one must be chosen.
    with pytest.raises(KeyError, match="agg_nextn"):
        unroll_sample(drafting, selection(), TEP4x2)
