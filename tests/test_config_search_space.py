"""search_space: choices, composites, pinned scalars, cross-field rules, parallel pins."""

import pytest
from conftest import build, config_data, rejected

from spica_lib.config.fields import OFFLOAD_WEIGHTS
from spica_lib.config.knob_values import list_defaults
from spica_lib.config.knobs import KNOBS, knob_fields

LIST_DEFAULTS = list_defaults()
CHOICES = {knob.name: knob.choices for knob in KNOBS.values() if knob.kind == "choice"}

SCALING_DICT = {
    "enable_throughput_scaling": True,
    "enable_load_scaling": False,
    "throughput_adjustment_interval_seconds": 240,
    "load_adjustment_interval_seconds": 5,
}


def test_defaults_fill_in():
    space = build(config_data()).search_space
    assert space.gpu_budget == 32
    assert space.deployment_mode == ["disagg", "agg"] and space.backend == ["vllm"]
    assert space.prefill_block_size == 64 and space.decode_enable_prefix_caching is False
    assert space.prefill_max_num_seqs == [1, 2, 4, 8, 16, 32, 64, 128, 256]
    assert len(space.load_predictor_candidates) == 11
    assert "disabled" in space.planner_scaling_policy and len(space.planner_scaling_policy) == 7
    assert space.router_mode == ["kv_router", "round_robin"]


@pytest.mark.parametrize("knob", sorted(set(LIST_DEFAULTS) - set(OFFLOAD_WEIGHTS)))
def test_every_atomic_knob_takes_a_subset_and_needs_one_value(knob):
    subset = list(LIST_DEFAULTS[knob])[-1:]
    assert getattr(build(config_data(search_space={knob: subset})).search_space, knob) == subset
    rejected(config_data(search_space={knob: []}), f"search_space.{knob}", "at least one")


@pytest.mark.parametrize("knob", sorted(CHOICES))
def test_vocabulary_knobs_refuse_anything_else(knob):
    rejected(config_data(search_space={knob: [*CHOICES[knob][:1], 999]}), f"search_space.{knob}", "999", "allowed")


def test_engine_knobs_take_any_whole_number_the_engine_accepts():
    space = build(config_data(search_space={"agg_max_num_batched_tokens": [2048, 4096.0]})).search_space
    assert space.agg_max_num_batched_tokens == [2048, 4096] and isinstance(space.agg_max_num_batched_tokens[1], int)
    assert build(config_data(search_space={"prefill_max_num_seqs": [3, 999]})).search_space.prefill_max_num_seqs == [
        3,
        999,
    ]
    for bad in (0, -1, 1.5, "2048", True):
        rejected(
            config_data(search_space={"agg_max_num_batched_tokens": [bad]}),
            "search_space.agg_max_num_batched_tokens",
            "max_num_batched_tokens is a whole number >= 1",
        )


def test_router_weights_take_what_dynamos_kv_router_accepts_and_name_its_rule():
    space = build(config_data(search_space={"overlap_score_credit": [0.3, 2]}))
    assert space.search_space.overlap_score_credit == [0.3, 2.0]
    rejected(config_data(search_space={"host_cache_hit_weight": [1.5]}), "search_space.host_cache_hit_weight",
             "KV router", "between 0 and 1")  # fmt: skip
    rejected(config_data(search_space={"prefill_load_scale": [-1]}), "search_space.prefill_load_scale")
    rejected(config_data(search_space={"router_temperature": [-0.5]}), "search_space.router_temperature",
             "greater than or equal to 0")  # fmt: skip
    rejected(config_data(search_space={"prefill_load_scale": ["1.0"]}), "search_space.prefill_load_scale")


def test_a_block_size_the_backend_refuses_is_refused_naming_the_engine_rule():
    rejected(config_data(search_space={"agg_block_size": 1, "backend": ["vllm"]}), "search_space.agg_block_size",
             "vllm engine", "at least 2")  # fmt: skip
    assert build(config_data(search_space={"agg_block_size": 16})).search_space.agg_block_size == 16


def test_omitted_knobs_take_the_tables_one_default():
    space = build(config_data()).search_space
    assert {name: getattr(space, name) for name in knob_fields()} == {
        name: knob.role_default(role) for knob in KNOBS.values() for role, name in knob.role_fields()
    }
    assert space.agg_max_num_seqs == [256, 512, 1024] and space.prefill_load_scale[-1] == 32.0  # the reference's sets
    assert space.backend == ["vllm"] and space.decode_nextn == [0] and space.nextn_accept_rates is None


def test_out_of_choice_values_named_in_the_error():
    rejected(config_data(search_space={"router_mode": ["bogus"]}), "search_space.router_mode", "'bogus'", "kv_router")
    rejected(config_data(search_space={"prefill_max_num_seqs": [0]}), "search_space.prefill_max_num_seqs", "0")
    rejected(
        config_data(search_space={"planner_scaling_policy": ["sometimes"]}),
        "search_space.planner_scaling_policy",
        "unknown preset 'sometimes'",
    )


def test_dict_entry_on_a_plain_knob_is_rejected():
    rejected(config_data(search_space={"router_mode": [{"mode": "kv_router"}]}), "search_space.router_mode")


def test_booleans_do_not_pass_for_numbers():
    rejected(config_data(search_space={"overlap_score_credit": [True]}), "search_space.overlap_score_credit")
    rejected(config_data(search_space={"gpu_budget": True}), "search_space.gpu_budget")


def test_strings_do_not_pass_for_numbers():
    rejected(config_data(search_space={"agg_max_num_seqs": ["256"]}), "search_space.agg_max_num_seqs")


def test_composite_dicts_accepted():
    data = config_data(
        search_space={
            "planner_scaling_policy": ["disabled", SCALING_DICT],
            "planner_fpm_sampling": [{"max_num_fpm_samples": 96, "fpm_sample_bucket_size": 16}],
            "load_predictor_candidates": [{"load_predictor": "prophet", "prophet_window_size": 20}],
        }
    )
    space = build(data).search_space
    assert space.planner_scaling_policy[1] == SCALING_DICT
    assert space.load_predictor_candidates == [{"load_predictor": "prophet", "prophet_window_size": 20}]


def test_composite_dict_problems():
    knob = "search_space.planner_scaling_policy"
    rejected(
        config_data(search_space={"planner_scaling_policy": [{**SCALING_DICT, "x": 1}]}), knob, "unknown keys ['x']"
    )
    partial = {"enable_throughput_scaling": True}
    rejected(config_data(search_space={"planner_scaling_policy": [partial]}), knob, "missing required keys")
    rejected(config_data(search_space={"planner_scaling_policy": [{}]}), knob, "must not be empty")
    rejected(
        config_data(search_space={"load_predictor_candidates": [{"prophet_window_size": 20}]}),
        "search_space.load_predictor_candidates",
        "missing required keys ['load_predictor']",
    )
    rejected(
        config_data(search_space={"planner_fpm_sampling": [{"max_num_fpm_samples": 64, "fpm_sample_bucket_size": 10}]}),
        "search_space.planner_fpm_sampling",
        "perfect square",
    )
    rejected(
        config_data(search_space={"planner_load_sensitivity": []}),
        "search_space.planner_load_sensitivity",
        "at least one",
    )


def test_gpu_budget_bounds():
    rejected(config_data(search_space={"gpu_budget": 0}), "search_space.gpu_budget", "greater than or equal to 1")
    space = build(config_data(search_space={"gpu_budget": 32, "min_gpu_budget": 8})).search_space
    assert (space.min_gpu_budget, space.gpu_budget) == (8, 32)
    rejected(
        config_data(search_space={"gpu_budget": 8, "min_gpu_budget": 16}),
        "search_space",
        "min_gpu_budget=16",
        "gpu_budget=8",
    )
    rejected(config_data(search_space={"min_gpu_budget": 0}), "search_space", "0 < min_gpu_budget")


def test_mtp_draft_tokens_are_searched_per_role_from_0_to_3():
    space = build(config_data(search_space={"decode_nextn": [0, 1, 2, 3], "agg_nextn": [2.0]})).search_space
    assert space.decode_nextn == [0, 1, 2, 3] and space.agg_nextn == [2] and space.most_draft_tokens == 3
    for bad in (4, -1, 1.5, True):
        rejected(config_data(search_space={"decode_nextn": [bad]}), "search_space.decode_nextn",
                 f"{bad!r} is not allowed", "nextn is a whole number from 0 to 3")  # fmt: skip
    assert "prefill_nextn" not in type(space).model_fields  # a prefill engine's drafts are never replayed
    rejected(config_data(search_space={"aic_nextn": 2}), "search_space", "aic_nextn 2 is no longer one setting",
             "decode_nextn: [2] and agg_nextn: [2]")  # fmt: skip


def test_mtp_acceptance_is_stated_the_mockers_own_unless_given_and_refused_where_nothing_drafts():
    space = build(config_data(search_space={"decode_nextn": [0, 3]})).search_space
    assert space.nextn_accept_rates == [0.85, 0.3, 0.0]  # ai-dynamo 1.5.1's mocker: 0.85, then 0.3, then none
    assert build(config_data(search_space={"agg_nextn": [1]})).search_space.nextn_accept_rates == [0.85]
    given = build(config_data(search_space={"decode_nextn": [2], "nextn_accept_rates": [0.7, 0.4]}))
    assert given.search_space.nextn_accept_rates == [0.7, 0.4]
    assert build(given.model_dump(mode="json")) == given  # config.json reads back
    for rates in ([0.7], [0.7, 0.4, 0.1], [0.7, 1.5]):
        rejected(config_data(search_space={"decode_nextn": [2], "nextn_accept_rates": rates}), "search_space",
                 f"nextn_accept_rates {rates}", "one acceptance rate in [0, 1] per draft position", "(2)")  # fmt: skip
    rejected(config_data(search_space={"nextn_accept_rates": [0.9]}), "search_space",
             "nextn_accept_rates [0.9]", "no role drafts", "would change nothing")  # fmt: skip


def test_the_summary_and_report_state_the_acceptance_the_drafts_were_replayed_at():
    from spica_lib.results.summary import mtp_note

    config = build(config_data(search_space={"agg_nextn": [0, 1, 2]}))
    note = mtp_note(config, {"agg_nextn": 2, "agg_max_num_seqs": 256})
    assert "draft tokens [0, 1, 2] per decode step searched" in note and note.endswith("the recommendation drafts 2")
    assert "acceptance rates [0.85, 0.3] (the pinned mocker's own: not measured for this model" in note
    given = build(config_data(search_space={"decode_nextn": [1], "nextn_accept_rates": [0.6]}))
    assert "acceptance rates [0.6] (as given;" in mtp_note(given, {"decode_max_num_seqs": 256})
    assert mtp_note(given, {}).endswith("the recommendation drafts 0") and mtp_note(build(config_data()), {}) is None


def test_a_knob_value_a_listed_backend_cannot_deploy_is_refused_naming_the_backends(monkeypatch):
    from dataclasses import replace

    mute = replace(KNOBS["nextn"], spellings={"vllm": KNOBS["nextn"].spellings["vllm"]})
    monkeypatch.setitem(KNOBS, "nextn", mute)
    rejected(config_data(search_space={"backend": ["vllm", "trtllm"], "decode_nextn": [0, 2]}), "search_space",
             "decode_nextn [0, 2]", "['trtllm'] cannot say nextn", "['vllm'] only")  # fmt: skip
    assert build(config_data(search_space={"backend": ["vllm"], "decode_nextn": [0, 2]}))


def test_pinned_scalars_are_checked():
    rejected(config_data(search_space={"agg_gpu_memory_utilization": 1.5}), "search_space.agg_gpu_memory_utilization")
    rejected(config_data(search_space={"decode_block_size": 0}), "search_space.decode_block_size")
    rejected(config_data(search_space={"context_length": 0}), "search_space.context_length")
    rejected(config_data(search_space={"model_name": ""}), "search_space.model_name")


@pytest.mark.parametrize(
    "given",
    [
        {"num_g2_blocks": 128, "kv_bytes_per_token": 4096},
        {"kv_bytes_per_token": 4096},
        {"bandwidth_g1_to_g2_gbps": 50},
        {"bandwidth_g2_to_g1_gbps": 50.5},
        {"offload_batch_size": 8},
        {"host_cache_hit_weight": [0.9]},
        {"disk_cache_hit_weight": [0.0, 0.5]},
    ],
)
def test_host_offload_settings_are_refused_because_the_replay_has_no_host_tier(given):
    rejected(config_data(search_space=given), "search_space", next(iter(given)), "does not simulate host-memory")


def test_offload_off_is_accepted_and_bad_values_still_name_their_field():
    assert build(config_data(search_space={"num_g2_blocks": 0})).search_space.num_g2_blocks == 0
    rejected(config_data(search_space={"bandwidth_g1_to_g2_gbps": 0}), "search_space.bandwidth_g1_to_g2_gbps")
    rejected(config_data(search_space={"offload_batch_size": 0}), "search_space.offload_batch_size")
    rejected(config_data(search_space={"kv_bytes_per_token": 0}), "search_space.kv_bytes_per_token")
    rejected(config_data(search_space={"kv_bytes_per_token": -1}), "search_space.kv_bytes_per_token")
    rejected(config_data(search_space={"num_g2_blocks": -1}), "search_space.num_g2_blocks")


@pytest.mark.parametrize(
    "pin",
    [
        {"active_decode_blocks_threshold": 10},
        {"active_prefill_tokens_threshold": 1000},
        {"active_prefill_tokens_threshold_frac": 0.5},
        {"no_admission_control": True},
    ],
)
def test_admission_pins_rejected_under_kv_router_and_as_settings_that_do_nothing_under_round_robin(pin):
    rejected(
        config_data(search_space={"router_mode": ["kv_router"], **pin}),
        "search_space",
        "not supported by the Dynamo replay",
    )
    rejected(config_data(search_space={"router_mode": ["round_robin"], **pin}), "search_space", "would change nothing")


def test_min_endpoint_needs_a_policy_that_scales():
    rejected(
        config_data(search_space={"planner_scaling_policy": ["disabled"], "min_endpoint": 2}),
        "search_space",
        "never scales, so it would change nothing",
    )
    space = build(config_data(search_space={"planner_scaling_policy": ["disabled", "load_180_5"], "min_endpoint": 2}))
    assert space.search_space.min_endpoint == 2


@pytest.mark.parametrize(
    "knob, value, policies, needed",
    [
        ("planner_fpm_sampling", ["large"], ["disabled"], "scales,"),
        ("planner_load_sensitivity", ["aggressive"], ["disabled", "throughput_180_5"], "scales on load"),
        ("load_predictor_candidates", ["arima_raw"], ["disabled", "load_180_5"], "scales on throughput"),
        ("startup_time", 120.0, ["disabled"], "scales (it is a new worker's start-up),"),
    ],
)
def test_a_planner_knob_set_by_hand_needs_a_policy_it_steers(knob, value, policies, needed):
    rejected(
        config_data(search_space={"planner_scaling_policy": policies, knob: value}),
        "search_space",
        f"{knob} steers an autoscaling planner that {needed.rstrip(',')}",
    )
    steered = "throughput_180_5" if knob == "load_predictor_candidates" else "load_180_5"
    space = build(config_data(search_space={"planner_scaling_policy": [*policies, steered], knob: value}))
    assert getattr(space.search_space, knob) == value
    # Left out, the knob takes its default list whatever the policies: nothing was asked for.
    assert build(config_data(search_space={"planner_scaling_policy": policies})).search_space


@pytest.mark.parametrize(
    "modes, knob, value",
    [
        (["agg"], "prefill_max_num_seqs", [8, 16]),
        (["agg"], "decode_block_size", 32),
        (["agg"], "prefill_gpu_memory_utilization", 0.8),
        (["disagg"], "agg_max_num_seqs", [128]),
        (["disagg"], "agg_enable_prefix_caching", False),
    ],
)
def test_a_roles_engine_settings_need_a_mode_with_that_role(modes, knob, value):
    rejected(config_data(search_space={"deployment_mode": modes, knob: value}), "search_space", f"['{knob}'] set the engines")
    both = build(config_data(search_space={"deployment_mode": ["agg", "disagg"], knob: value}))
    assert getattr(both.search_space, knob) == value


@pytest.mark.parametrize("knob, value", [("overlap_score_credit", [0.1]), ("prefill_load_scale", [2.0]), ("router_temperature", [0.5])])
def test_kv_router_weights_need_the_kv_router(knob, value):
    rejected(config_data(search_space={"router_mode": ["round_robin"], knob: value}), "search_space", "weigh the KV router")
    assert getattr(build(config_data(search_space={"router_mode": ["kv_router"], knob: value})).search_space, knob) == value
    # prefill_load_scale is the router's, not the prefill engine's: an agg-only search takes it.
    assert build(config_data(search_space={"deployment_mode": ["agg"], "router_mode": ["kv_router"], knob: value}))


def test_a_normalised_config_with_every_default_filled_in_reads_back():
    # The refusals compare with the defaults, so config.json (every field written) validates again.
    data = config_data(search_space={"deployment_mode": ["agg"], "router_mode": ["round_robin"],
                                     "planner_scaling_policy": ["disabled"]})  # fmt: skip
    config = build(data)
    assert build(config.model_dump(mode="json")) == config


def test_parallel_pins_need_exactly_one_mode():
    rejected(
        config_data(search_space={"parallel_configs": [{"tp": 1, "replicas": 2}]}), "search_space", "exactly one mode"
    )
    space = build(
        config_data(search_space={"deployment_mode": ["agg"], "parallel_configs": [{"tp": 1, "replicas": 2}]})
    ).search_space
    assert space.parallel_configs == [{"tp": 1, "replicas": 2}]


def test_parallel_pin_shapes():
    agg = {"deployment_mode": ["agg"]}
    disagg = {"deployment_mode": ["disagg"]}
    path = "search_space.parallel_configs"
    rejected(config_data(search_space={**agg, "parallel_configs": [{"replicas": 2}]}), path, "needs 'tp'")
    rejected(
        config_data(search_space={**agg, "parallel_configs": [{"tp": 2, "width": 2}]}), path, "unknown keys ['width']"
    )
    rejected(config_data(search_space={**agg, "parallel_configs": [{"tp": 0}]}), path, "positive integer")
    rejected(
        config_data(search_space={**disagg, "parallel_configs": [{"prefill": {"tp": 1}}]}),
        path,
        "'prefill' and 'decode'",
    )
    rejected(
        config_data(search_space={**disagg, "parallel_configs": [{"prefill": 1, "decode": {"tp": 1}}]}),
        path,
        "entry 0.prefill",
    )
    rejected(
        config_data(search_space={**disagg, "parallel_configs": [{"prefill": {"tp": 1}, "decode": {"replicas": 1}}]}),
        path,
        "entry 0.decode",
        "needs 'tp'",
    )
    rejected(config_data(search_space={**disagg, "parallel_configs": [{"tp": 1}]}), "search_space", "disagg")
    rejected(
        config_data(search_space={**agg, "parallel_configs": [{"prefill": {"tp": 1}, "decode": {"tp": 1}}]}),
        "search_space",
        "agg",
    )
    rejected(config_data(search_space={**agg, "parallel_configs": [3]}), "search_space.parallel_configs[0]")
    good = [{"prefill": {"tp": 2, "replicas": 2}, "decode": {"tp": 4}}]
    assert build(config_data(search_space={**disagg, "parallel_configs": good})).search_space.parallel_configs == good


def test_whole_floats_are_stored_as_the_canonical_choice():
    space = build(config_data(search_space={"agg_max_num_batched_tokens": [8192.0]})).search_space
    assert space.agg_max_num_batched_tokens == [8192] and isinstance(space.agg_max_num_batched_tokens[0], int)


@pytest.mark.parametrize(
    "field, good, bad",
    [
        ("min_endpoint", 2, 0),
        ("startup_time", 300.0, -1),
        ("prefill_gpu_memory_utilization", 1, 0),
        ("agg_block_size", 32, -64),
        ("agg_enable_prefix_caching", False, "no"),
    ],
)
def test_pinned_scalar_bounds(field, good, bad):
    assert getattr(build(config_data(search_space={field: good})).search_space, field) == good
    rejected(config_data(search_space={field: bad}), f"search_space.{field}")
