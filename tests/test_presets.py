"""Composite presets and dict entries decode to the fields the planner receives."""

import pytest
from pydantic import ValidationError

from spica_lib.config.presets import (
    LOAD_PREDICTOR_PRESETS,
    fpm_sampling,
    load_predictor,
    load_sensitivity,
    predictor_label,
    scaling_policy,
    throughput_intervals,
)


def test_scaling_presets_decode_to_flags_and_intervals():
    hybrid = scaling_policy("hybrid_180_5")
    assert (hybrid.enable_throughput_scaling, hybrid.enable_load_scaling) == (True, True)
    assert (hybrid.throughput_adjustment_interval_seconds, hybrid.load_adjustment_interval_seconds) == (180, 5)
    disabled = scaling_policy("disabled")
    assert not disabled.scales
    assert disabled.throughput_adjustment_interval_seconds is None
    assert scaling_policy("throughput_600_5").throughput_adjustment_interval_seconds == 600
    assert scaling_policy("load_180_10").load_adjustment_interval_seconds == 10


def test_scaling_dict_replaces_the_preset():
    policy = scaling_policy(
        {
            "enable_throughput_scaling": True,
            "enable_load_scaling": False,
            "throughput_adjustment_interval_seconds": 240,
            "load_adjustment_interval_seconds": None,
        }
    )
    assert policy.enable_throughput_scaling and not policy.enable_load_scaling
    assert policy.throughput_adjustment_interval_seconds == 240


def test_scaling_dict_with_both_flags_off_is_planner_off():
    policy = scaling_policy(
        {
            "enable_throughput_scaling": False,
            "enable_load_scaling": False,
            "throughput_adjustment_interval_seconds": 100,
            "load_adjustment_interval_seconds": 5,
        }
    )
    assert not policy.scales


def test_enabled_scaling_without_interval_is_rejected():
    with pytest.raises(ValidationError, match="throughput_adjustment_interval_seconds must be"):
        scaling_policy(
            {
                "enable_throughput_scaling": True,
                "enable_load_scaling": False,
                "throughput_adjustment_interval_seconds": None,
                "load_adjustment_interval_seconds": None,
            }
        )


def test_throughput_intervals_are_distinct_sorted_and_only_from_throughput_policies():
    assert throughput_intervals(["throughput_600_5", "hybrid_180_5", "throughput_180_5", "load_180_5"]) == [180, 600]
    assert throughput_intervals(["disabled", "load_180_5", "load_180_10"]) == []
    mixed = [
        "throughput_180_5",
        {
            "enable_throughput_scaling": True,
            "enable_load_scaling": True,
            "throughput_adjustment_interval_seconds": 240,
            "load_adjustment_interval_seconds": 5,
        },
    ]
    assert throughput_intervals(mixed) == [180, 240]


def test_fpm_and_sensitivity_presets_and_dicts():
    assert fpm_sampling("large").model_dump() == {"max_num_fpm_samples": 128, "fpm_sample_bucket_size": 16}
    assert fpm_sampling("fine").fpm_sample_bucket_size == 64
    assert fpm_sampling({"max_num_fpm_samples": 96, "fpm_sample_bucket_size": 16}).max_num_fpm_samples == 96
    assert load_sensitivity("aggressive").model_dump() == {
        "load_scaling_down_sensitivity": 70,
        "load_min_observations": 3,
    }
    custom = load_sensitivity({"load_scaling_down_sensitivity": 75, "load_min_observations": 4})
    assert (custom.load_scaling_down_sensitivity, custom.load_min_observations) == (75, 4)


def test_fpm_bucket_must_be_a_perfect_square():
    with pytest.raises(ValidationError, match="perfect square"):
        fpm_sampling({"max_num_fpm_samples": 64, "fpm_sample_bucket_size": 12})


def test_sensitivity_is_a_percentage():
    with pytest.raises(ValidationError):
        load_sensitivity({"load_scaling_down_sensitivity": 120, "load_min_observations": 4})


def test_all_eleven_predictor_presets_and_their_fields():
    assert len(LOAD_PREDICTOR_PRESETS) == 11
    prophet = load_predictor("prophet_w20_log1p")
    assert prophet.fields() == {"load_predictor": "prophet", "load_predictor_log1p": True, "prophet_window_size": 20}
    kalman = load_predictor("kalman_reactive_raw").fields()
    assert kalman["kalman_q_level"] == 10.0 and kalman["kalman_min_points"] == 3
    assert load_predictor("arima_raw").fields() == {"load_predictor": "arima", "load_predictor_log1p": False}


def test_predictor_dict_fills_family_defaults_and_emits_only_its_family_knobs():
    spec = load_predictor({"load_predictor": "kalman", "kalman_q_level": 3.0})
    assert spec.kalman_q_level == 3.0 and spec.kalman_min_points == 5
    fields = load_predictor({"load_predictor": "prophet", "prophet_window_size": 30}).fields()
    assert fields == {"load_predictor": "prophet", "load_predictor_log1p": False, "prophet_window_size": 30}


def test_unknown_predictor_family_is_rejected():
    with pytest.raises(ValidationError, match="constant"):
        load_predictor({"load_predictor": "lstm"})


def test_predictor_labels():
    assert predictor_label("arima_raw", 0) == "arima_raw"
    assert predictor_label({"load_predictor": "constant"}, 3) == "custom_3"


def test_intervals_are_whole_seconds():
    entry = {"enable_throughput_scaling": True, "enable_load_scaling": False, "load_adjustment_interval_seconds": None}
    assert (
        scaling_policy(
            {**entry, "throughput_adjustment_interval_seconds": 240.0}
        ).throughput_adjustment_interval_seconds
        == 240
    )
    with pytest.raises(ValidationError):
        scaling_policy({**entry, "throughput_adjustment_interval_seconds": 2.5})
