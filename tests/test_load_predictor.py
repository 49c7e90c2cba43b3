"""Load-predictor sub-sweep: loss, windows, shortcuts, winners, and Dynamo's own predictors."""

import json
import math

import pytest
from conftest import TRACE, build, config_data

from spica_lib.config.presets import LOAD_PREDICTOR_PRESETS
from spica_lib.predictor.dynamo import dynamo_predictor
from spica_lib.predictor.plan import PresetScore, merge_scores, plan_predictor_jobs
from spica_lib.predictor.scoring import Window, build_windows, score_candidate, score_predictor_job, window_loss
from spica_lib.predictor.warmup import minimum_windows, warmup_windows

TRACE_WORKLOAD = {"isl": None, "osl": None, "request_rate": None, "num_request_ratio": None, "trace_path": str(TRACE)}
GOODPUT = {"target": "goodput", "sla": {"ttft_ms": 1000, "itl_ms": 50}}


def test_loss_of_an_exact_forecast_is_zero():
    w = Window(num_req=10, isl=1000, osl=100)
    assert window_loss(w, w) == 0.0
    empty = Window(num_req=0, isl=0, osl=0)
    assert window_loss(empty, empty) == 0.0


def test_loss_grows_with_over_prediction_and_with_traffic_in_a_lull():
    actual = Window(num_req=10, isl=1000, osl=100)
    assert (
        0
        < window_loss(Window(num_req=12, isl=1000, osl=100), actual)
        < window_loss(Window(num_req=40, isl=1000, osl=100), actual)
    )
    assert window_loss(Window(num_req=5, isl=1000, osl=100), Window(num_req=0, isl=0, osl=0)) > 0


def test_an_isl_only_error_weighs_one_half_for_a_single_request():
    predicted, actual = Window(num_req=1, isl=2000, osl=100), Window(num_req=1, isl=1000, osl=100)
    assert window_loss(predicted, actual) == pytest.approx(0.5 * abs(math.log1p(2000) - math.log1p(1000)))


def plan_for(policies, workload=None, goal=GOODPUT, candidates=None):
    data = config_data(search_space={"planner_scaling_policy": policies}, workload=workload or {})
    data["goal"] = goal
    if candidates:
        data["search_space"]["load_predictor_candidates"] = candidates
    config = build(data)
    return plan_predictor_jobs(config, policies)


def test_no_throughput_scaling_means_nothing_to_choose():
    plan = plan_for(["disabled", "load_180_5"], workload=TRACE_WORKLOAD)
    assert plan.reason == "no_throughput_scaling_candidate" and plan.jobs == []
    result, rows = merge_scores(plan, [])
    assert result.best_by_interval == {} and rows == []


def test_synthetic_workload_is_constant_at_every_interval():
    plan = plan_for(["throughput_180_5", "hybrid_600_5"])
    assert plan.reason == "static_workload_constant" and plan.jobs == []
    result, _ = merge_scores(plan, [])
    assert result.best_by_interval == {180: "constant_last", 600: "constant_last"}
    assert result.winners() == {180.0: "constant_last", 600.0: "constant_last"}


def test_a_trace_sweeps_every_candidate_at_every_interval():
    plan = plan_for(
        ["throughput_180_5", "hybrid_600_5", "disabled"],
        workload=TRACE_WORKLOAD,
        candidates=["constant_last", {"load_predictor": "kalman"}],
    )
    assert plan.reason == "swept" and plan.intervals == [180, 600]
    assert [(j.interval, j.label) for j in plan.jobs] == [
        (180, "constant_last"),
        (180, "custom_1"),
        (600, "constant_last"),
        (600, "custom_1"),
    ]


def score(interval, label, loss, entry=None):
    return PresetScore(
        interval=interval,
        label=label,
        entry=entry or label,
        family="constant",
        log1p=False,
        loss=loss,
        windows=4,
        windows_scored=3 if loss is not None else 0,
        warmup=1,
        seconds=0.1,
    )


def test_lowest_loss_wins_and_the_earlier_candidate_wins_a_tie():
    plan = plan_for(
        ["throughput_180_5"], workload=TRACE_WORKLOAD, candidates=["arima_raw", "kalman_default_raw", "constant_last"]
    )
    result, rows = merge_scores(
        plan, [score(180, "constant_last", 0.2), score(180, "arima_raw", 0.2), score(180, "kalman_default_raw", 0.3)]
    )
    assert result.best_by_interval == {180: "arima_raw"} and result.reason == "swept"
    assert [r["winner"] for r in rows] == [True, False, False]


def test_all_infinite_falls_back_to_constant_and_says_so():
    plan = plan_for(["throughput_180_5"], workload=TRACE_WORKLOAD, candidates=["arima_raw", "prophet_w20_raw"])
    result, rows = merge_scores(plan, [score(180, "arima_raw", None), score(180, "prophet_w20_raw", None)])
    assert result.best_by_interval == {180: "constant_last"}
    assert "no_winner_fallback_constant_last" in result.reason and "180" in result.reason
    assert result.losses == {180: {"arima_raw": None, "prophet_w20_raw": None}} and all(
        r["loss"] == math.inf for r in rows
    )


class LastValuePredictor:
    """Fake predictor (tests the scoring loop only): forecasts the last value seen."""

    minimum_data_points = 1

    def __init__(self, *_):
        self.values = []

    def add_data_point(self, value):
        self.values.append(value)

    def get_last_value(self):
        return self.values[-1] if self.values else 0.0

    def predict_next(self):
        return self.get_last_value()


def test_scoring_loop_averages_the_windows_after_warmup():
    windows = [
        Window(num_req=10, isl=100, osl=10),
        Window(num_req=20, isl=100, osl=10),
        Window(num_req=20, isl=200, osl=20),
    ]
    loss, scored = score_candidate(
        windows, "constant_last", 60, warmup=1, factory=lambda spec, interval: LastValuePredictor()
    )
    expected = (window_loss(windows[0], windows[1]) + window_loss(windows[1], windows[2])) / 2
    assert scored == 2 and loss == pytest.approx(expected)
    assert score_candidate(windows, "constant_last", 60, warmup=3, factory=lambda s, i: LastValuePredictor()) == (
        None,
        0,
    )


def test_warmup_is_the_largest_minimum():
    assert warmup_windows(["constant_last"]) == 1
    assert warmup_windows(["constant_last", "kalman_reactive_raw"]) == 3
    assert warmup_windows(list(LOAD_PREDICTOR_PRESETS)) == 5
    assert warmup_windows([{"load_predictor": "kalman", "kalman_min_points": 8}, "arima_raw"]) == 8


@pytest.mark.slow
def test_warmup_table_matches_dynamos_predictors():
    for label, spec in LOAD_PREDICTOR_PRESETS.items():
        assert dynamo_predictor(spec, 60).minimum_data_points == minimum_windows(spec), label


@pytest.mark.slow
def test_windows_keep_empty_middles_and_drop_idle_edges(tmp_path):
    path = tmp_path / "tiny.jsonl"
    rows = [(25_000, 100, 10), (27_000, 300, 30), (62_000, 200, 20)]  # busy at 20-30 s and 60-70 s
    path.write_text(
        "".join(
            json.dumps({"timestamp": t, "input_length": i, "output_length": o, "hash_ids": [0]}) + "\n"
            for t, i, o in rows
        )
    )
    windows = build_windows(str(path), 10)
    assert [w.num_req for w in windows] == [2, 0, 0, 0, 1]
    assert (windows[0].isl, windows[0].osl) == (200, 20) and windows[1] == Window(num_req=0, isl=0, osl=0)
    assert [w.num_req for w in build_windows(str(path), 5)] == [2, 0, 0, 0, 0, 0, 0, 1]
    assert [w.num_req for w in build_windows(str(path), 10, arrival_speedup_ratio=2.0)] == [
        2,
        0,
        1,
    ]  # 20 s of trace per window


@pytest.mark.slow
def test_identical_windows_give_a_perfect_constant_forecast(tmp_path):
    path = tmp_path / "flat.jsonl"
    lines = [
        json.dumps({"timestamp": k * 10_000 + j * 100, "input_length": 500, "output_length": 50, "hash_ids": [0]})
        for k in range(12)
        for j in range(3)
    ]
    path.write_text("\n".join(lines) + "\n")
    plan = plan_for(
        ["throughput_180_5"],
        workload={**TRACE_WORKLOAD, "trace_path": str(path)},
        candidates=["constant_last", "kalman_reactive_raw"],
    )
    job = plan.jobs[0].model_copy(update={"interval": 10})
    result = score_predictor_job(job, str(path), 1.0, ["constant_last", "kalman_reactive_raw"])
    assert result.windows == 12 and result.windows_scored == 9 and result.loss == 0.0


@pytest.mark.slow
def test_every_preset_gets_a_finite_loss_on_the_shared_trace():
    # One interval: the scoring is the same code at every interval, and the Prophet fits make each pass
    # over the presets cost 15-25 s (the 180 s one is the cheaper, with windows left to score).
    entries, interval = list(LOAD_PREDICTOR_PRESETS), 180
    windows = build_windows(str(TRACE), interval)
    losses = {label: score_candidate(windows, label, interval, warmup_windows(entries))[0] for label in entries}
    assert all(loss is not None and math.isfinite(loss) for loss in losses.values()), losses
    assert len(set(losses.values())) > 3  # the families really forecast differently


def test_validate_warns_with_the_numbers_when_a_holdout_leaves_too_few_windows_to_score_a_predictor():
    from spica_lib.config.policies import apply_policy_filters
    from spica_lib.predictor.plan import window_warnings

    data = config_data(search_space={"gpu_budget": 16, "planner_scaling_policy": ["throughput_180_5"]},
                       goal={"target": "goodput_per_gpu", "sla": {"ttft_ms": 3000, "itl_ms": 40}})  # fmt: skip
    data["workload"] = {"trace_path": str(TRACE), "holdout": 0.25}
    held = build(data)
    (warning,) = window_warnings(held, apply_policy_filters(held).kept)
    # The shipped trace spans 1022 s; its first 767 s are searched: 5 windows of 180 s, all of them warm-up.
    assert "at a 180 s interval" in warning and "767 s replayed" in warning
    assert "5 window(s), 5 of them warm-up, 0 left to score" in warning and "constant_last" in warning
    data["workload"] = {"trace_path": str(TRACE)}
    data["search_space"]["planner_scaling_policy"] = [
        {"enable_throughput_scaling": True, "enable_load_scaling": False, "throughput_adjustment_interval_seconds": 60,
         "load_adjustment_interval_seconds": None}
    ]  # fmt: skip
    whole = build(data)
    assert window_warnings(whole, apply_policy_filters(whole).kept) == []  # 18 windows of 60 s, 13 scored
