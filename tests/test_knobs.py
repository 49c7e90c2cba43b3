"""Which knobs each branch searches."""

from conftest import build, config_data

from spica_lib.pools.knobs import branch_knob_choices, combinations


def space(**search_space):
    return build(config_data(search_space=search_space)).search_space


def test_engine_knobs_follow_the_mode():
    agg = branch_knob_choices(space(), "agg")
    disagg = branch_knob_choices(space(), "disagg")
    assert {"agg_max_num_batched_tokens", "agg_max_num_seqs"} <= set(agg)
    assert not any(k.startswith(("prefill_max", "decode_max")) for k in agg)
    assert {"prefill_max_num_seqs", "decode_max_num_seqs", "decode_max_num_batched_tokens"} <= set(disagg)
    assert not any(k.startswith("agg_") for k in disagg)


def test_round_robin_only_prunes_the_kv_router_weights():
    choices = branch_knob_choices(space(router_mode=["round_robin"]), "agg")
    assert choices["router_mode"] == ["round_robin"]
    assert "overlap_score_credit" not in choices and "router_temperature" not in choices
    mixed = branch_knob_choices(space(), "agg")
    assert {"overlap_score_credit", "prefill_load_scale", "router_temperature"} <= set(mixed)


def test_cache_tier_weights_are_never_searched_without_a_host_tier_in_the_replay():
    for mode in ("agg", "disagg"):
        assert not {"host_cache_hit_weight", "disk_cache_hit_weight"} & set(branch_knob_choices(space(), mode))


def test_planner_sampling_only_when_a_policy_scales():
    off = branch_knob_choices(space(planner_scaling_policy=["disabled"]), "agg")
    assert off["planner_scaling_policy"] == ["disabled"]
    assert "planner_fpm_sampling" not in off and "planner_load_sensitivity" not in off
    on = branch_knob_choices(space(planner_scaling_policy=["disabled", "load_180_5"]), "agg")
    assert {"planner_fpm_sampling", "planner_load_sensitivity"} <= set(on)


def test_filtered_policies_override_the_configured_list():
    choices = branch_knob_choices(space(), "agg", policies=["disabled"])
    assert choices["planner_scaling_policy"] == ["disabled"] and "planner_fpm_sampling" not in choices


def test_combinations_multiply_choice_counts():
    assert combinations({"a": [1, 2], "b": [1, 2, 3], "c": ["x"]}) == 6
