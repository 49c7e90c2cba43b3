"""goal and sweep: targets, SLA requirements, Pareto objectives, and the sweep's bounds."""

import pytest
from conftest import TRACE, build, config_data, rejected

from spica_lib.config import OptimizationTarget as T
from spica_lib.config import SmartSearchConfig

SLA = {"ttft_ms": 2000, "itl_ms": 50}


def test_goal_defaults_to_throughput_without_sla():
    goal = build(config_data()).goal
    assert goal.target is T.THROUGHPUT and goal.sla is None and not goal.is_pareto


@pytest.mark.parametrize(
    "target, maximize, planner",
    [
        (T.THROUGHPUT, True, "throughput"),
        (T.THROUGHPUT_PER_GPU, True, "throughput"),
        (T.THROUGHPUT_PER_USER, True, "throughput"),
        (T.E2E_LATENCY, False, "latency"),
        (T.GOODPUT, True, "sla"),
        (T.GOODPUT_PER_GPU, True, "sla"),
    ],
)
def test_direction_and_planner_target(target, maximize, planner):
    assert target.maximize is maximize
    assert target.planner_optimization_target == planner


def test_pareto_has_no_scalar_direction_but_a_planner_target():
    with pytest.raises(ValueError, match="no single direction"):
        _ = T.PARETO.maximize
    assert T.PARETO.planner_optimization_target == "throughput"


@pytest.mark.parametrize("target", ["goodput", "goodput_per_gpu"])
def test_goodput_needs_an_sla(target):
    rejected(config_data(goal={"target": target}), "goal", "SLA", "ttft_ms and itl_ms")
    rejected(config_data(goal={"target": target, "sla": {"ttft_ms": 500}}), "goal", target)
    assert build(config_data(goal={"target": target, "sla": SLA})).goal.sla.seeds_planner
    assert build(config_data(goal={"target": target, "sla": {"e2e_ms": 9000}})).goal.sla.defines_goodput


def test_throughput_per_gpu_needs_no_sla():
    assert build(config_data(goal={"target": "throughput_per_gpu"})).goal.sla is None


@pytest.mark.parametrize("field", ["ttft_ms", "itl_ms", "e2e_ms"])
def test_sla_bounds_must_be_positive(field):
    rejected(config_data(goal={"target": "goodput", "sla": {**SLA, field: 0}}), f"goal.sla.{field}")


def test_unknown_target_is_rejected():
    rejected(config_data(goal={"target": "cheapest"}), "goal.target", "'cheapest'")


def test_pareto_defaults_and_custom_objectives():
    data = config_data(workload={"request_rate": None}, goal={"target": "pareto"})
    config = build(data)
    assert config.goal.resolved_pareto_objectives == [T.THROUGHPUT_PER_GPU, T.THROUGHPUT_PER_USER]
    assert config.workload.kv_load_ratio == [0.0, 1.0]  # injected for a Pareto sweep with no load driver
    custom = build(
        config_data(goal={"target": "pareto", "pareto_objectives": ["goodput_per_gpu", "e2e_latency"], "sla": SLA})
    ).goal
    assert custom.objectives == [T.GOODPUT_PER_GPU, T.E2E_LATENCY]


def test_pareto_default_load_is_not_injected_when_a_driver_or_trace_is_given():
    config = build(config_data(goal={"target": "pareto"}))
    assert config.workload.kv_load_ratio is None and config.workload.request_rate == 4.0


def test_pareto_objective_rules():
    rejected(
        config_data(goal={"pareto_objectives": ["throughput", "e2e_latency"]}),
        "goal",
        "only applies when target is 'pareto'",
    )
    rejected(config_data(goal={"target": "pareto", "pareto_objectives": []}), "goal", "at least 2")
    rejected(config_data(goal={"target": "pareto", "pareto_objectives": ["throughput"]}), "goal", "at least 2")
    rejected(
        config_data(goal={"target": "pareto", "pareto_objectives": ["throughput", "throughput"]}), "goal", "distinct"
    )
    rejected(
        config_data(goal={"target": "pareto", "pareto_objectives": ["throughput", "pareto"]}),
        "goal",
        "cannot contain 'pareto'",
    )
    rejected(
        config_data(goal={"target": "pareto", "pareto_objectives": ["throughput", "goodput"]}),
        "goal",
        "['goodput']",
        "SLA",
    )


def test_sweep_defaults():
    sweep = build(config_data()).sweep
    assert (sweep.max_rounds, sweep.parallel_evals, sweep.candidates_per_round) == (20, 16, None)
    assert sweep.max_eval_seconds == 60.4 and sweep.seed == 0 and sweep.top_k == 3
    assert sweep.per_round == 16
    assert build(config_data(sweep={"candidates_per_round": 4})).sweep.per_round == 4


@pytest.mark.parametrize("field", ["max_rounds", "parallel_evals", "candidates_per_round", "max_eval_seconds", "top_k"])
def test_sweep_sizes_must_be_positive(field):
    rejected(config_data(sweep={field: 0}), f"sweep.{field}")


def test_sweep_seed_is_a_non_negative_int():
    assert build(config_data(sweep={"seed": 42})).sweep.seed == 42
    rejected(config_data(sweep={"seed": -1}), "sweep.seed")
    rejected(config_data(sweep={"seed": 1.5}), "sweep.seed")


def test_algorithm_default_depends_on_the_goal_and_is_filled_in():
    assert build(config_data()).sweep.algorithm == "nsga2"
    pareto = build(config_data(goal={"target": "pareto"}))
    assert pareto.sweep.algorithm == "nsga2"
    assert build(config_data(sweep={"algorithm": "gp_ucb_pe"})).sweep.algorithm == "gp_ucb_pe"


def test_unknown_algorithm_lists_the_offered_ones():
    rejected(config_data(sweep={"algorithm": "simulated_annealing"}), "sweep.algorithm", "'eagle'", "'nsga2'")


def test_single_metric_algorithm_cannot_drive_a_pareto_goal():
    rejected(config_data(goal={"target": "pareto"}, sweep={"algorithm": "eagle"}), "", "single metric", "nsga2")


def test_sla_is_per_token_or_end_to_end_not_both():
    rejected(config_data(goal={"target": "goodput", "sla": {**SLA, "e2e_ms": 9000}}), "goal.sla", "e2e_ms alone")
    rejected(config_data(goal={"target": "goodput", "sla": {"ttft_ms": 100, "e2e_ms": 9000}}), "goal.sla")


def test_a_replay_always_has_a_finite_time_limit():
    for value in (float("inf"), float("nan")):
        data = config_data()
        data["sweep"] = {"max_eval_seconds": value}
        rejected(data, "sweep.max_eval_seconds", "finite")
    data = config_data()
    data["sweep"] = {"max_eval_seconds": None}
    rejected(data, "sweep.max_eval_seconds")
    assert build(config_data()).sweep.max_eval_seconds == 60.0 + 0.01 * 40  # 10 x 4 req/s: derived, see below


def test_the_default_time_limit_scales_with_the_workload_and_a_given_one_is_kept():
    small = build(config_data(workload={"request_rate": 4.0, "num_request_ratio": 10})).sweep.max_eval_seconds
    large = build(config_data(workload={"request_rate": 40.0, "num_request_ratio": 1000})).sweep.max_eval_seconds
    assert small == 60.4 and large == 460.0  # a minute, plus 10 ms per request
    huge = build(config_data(workload={"request_rate": 100.0, "num_request_ratio": 10_000})).sweep.max_eval_seconds
    assert huge == 3600.0
    trace = {"isl": None, "osl": None, "request_rate": None, "num_request_ratio": None, "trace_path": str(TRACE)}
    assert build(config_data(workload=trace)).sweep.max_eval_seconds == 60.0 + 0.01 * 3993  # the trace's records
    kv_load = build(config_data(workload={"request_rate": None, "kv_load_ratio": 0.5})).sweep.max_eval_seconds
    assert kv_load == 600.0  # each candidate sizes its own request count
    given = build(
        config_data(workload={"request_rate": 40.0, "num_request_ratio": 1000}, sweep={"max_eval_seconds": 30})
    )
    assert given.sweep.max_eval_seconds == 30
    again = SmartSearchConfig.model_validate(given.model_dump(mode="json"))
    assert again.sweep.max_eval_seconds == 30


def test_a_percentile_sla_reads_that_statistic_and_refuses_what_it_cannot_mean():
    goal = build(
        config_data(goal={"target": "throughput", "sla": {"ttft_ms": 500, "itl_ms": 40, "percentile": 99}})
    ).goal
    assert goal.sla.bounds() == [("p99_ttft_ms", 500.0), ("p99_itl_ms", 40.0)] and goal.sla.is_constraint
    median = build(config_data(goal={"target": "throughput", "sla": {"e2e_ms": 9000, "percentile": 50}})).goal
    assert median.sla.bounds() == [("median_e2e_latency_ms", 9000.0)]
    mean = build(config_data(goal={"target": "goodput", "sla": {"e2e_ms": 500}})).goal
    assert mean.sla.bounds() == [("mean_e2e_latency_ms", 500.0)] and not mean.sla.is_constraint
    for bad in (98, 100, "p99", 99.5):
        rejected(config_data(goal={"sla": {"ttft_ms": 500, "percentile": bad}}), "goal.sla.percentile", "50")
    rejected(config_data(goal={"sla": {"percentile": 99}}), "goal.sla", "needs at least one bound")
    rejected(config_data(goal={"sla": {"p99_ttft_ms": 500}}), "goal.sla.p99_ttft_ms")  # one spelling only


def test_gpu_hour_prices_are_checked_and_the_cost_target_needs_one():
    one = build(config_data(goal={"target": "cost_per_million_output_tokens", "gpu_hour_usd": 3.2})).goal
    assert one.gpu_hour_price("h200_sxm") == 3.2 and not one.target.maximize
    per_sku = build(config_data(goal={"gpu_hour_usd": {"h200_sxm": 3, "b200_sxm": 5.5}})).goal
    assert per_sku.gpu_hour_price("h200_sxm") == 3.0
    rejected(config_data(goal={"target": "cost_per_million_output_tokens"}), "goal", "needs goal.gpu_hour_usd")
    for bad in (-1, 0):
        rejected(config_data(goal={"gpu_hour_usd": bad}), "goal.gpu_hour_usd", "positive number of US dollars")
    rejected(config_data(goal={"gpu_hour_usd": {"h200_sxm": -2}}), "goal.gpu_hour_usd", "positive")
    rejected(config_data(goal={"gpu_hour_usd": {}}), "goal.gpu_hour_usd", "empty price map")
    rejected(config_data(goal={"gpu_hour_usd": {"b200_sxm": 5}}), "", "not search_space.hardware_sku 'h200_sxm'")
    pareto = {"target": "pareto", "pareto_objectives": ["cost_per_million_output_tokens", "throughput_per_user"]}
    assert build(config_data(goal={**pareto, "gpu_hour_usd": 3})).goal.is_pareto


def test_a_percentile_sla_on_too_few_requests_is_warned_with_the_number_needed():
    from spica_lib.config.goal import requests_for_percentile

    assert [requests_for_percentile(p) for p in (50, 75, 90, 95, 99)] == [20, 40, 100, 200, 1000]
    sla = {"ttft_ms": 500, "itl_ms": 40, "percentile": 99}
    small = build(config_data(goal={"target": "throughput", "sla": sla}))  # 4 req/s x 10 = 40 requests
    (warning,) = small.sample_size_warnings()
    assert "percentile 99 on 40 requests" in warning and "at least 1000 requests" in warning
    enough = config_data(goal={"target": "throughput", "sla": sla}, workload={"num_request_ratio": 250})
    assert build(enough).sample_size_warnings() == []
    assert build(config_data(goal={"target": "throughput", "sla": {**sla, "percentile": 90}}, workload={"num_request_ratio": 25})).sample_size_warnings() == []
    assert build(config_data()).sample_size_warnings() == []  # means: no tail to fill


def test_an_sla_means_one_thing_mean_bounds_shape_goodput_and_are_refused_where_nothing_counts_goodput():
    # Mean bounds decide which requests count as goodput; for any other target they would only screen.
    for target in ("throughput", "throughput_per_gpu", "e2e_latency"):
        rejected(config_data(goal={"target": target, "sla": {"ttft_ms": 500, "itl_ms": 40}}), "goal", "counts no goodput", "percentile")
    priced = {"target": "cost_per_million_output_tokens", "gpu_hour_usd": 3.0, "sla": {"e2e_ms": 9000}}
    rejected(config_data(goal=priced), "goal", "counts no goodput")
    # As a constraint (a percentile) the bounds mean the same for every target: candidates over it are infeasible.
    latency = build(config_data(goal={"target": "e2e_latency", "sla": {"ttft_ms": 500, "percentile": 90}}))
    assert latency.goal.sla.is_constraint and latency.sweep.screen_fraction is not None
    pareto = {"target": "pareto", "pareto_objectives": ["goodput_per_gpu", "e2e_latency"], "sla": {"ttft_ms": 500, "itl_ms": 40}}
    assert build(config_data(goal=pareto)).goal.sla is not None  # a goodput objective counts the bounds


def test_the_stress_test_is_on_for_a_scalar_goal_and_refused_where_it_has_no_first():
    sweep = build(config_data()).sweep
    assert (sweep.stress_top, sweep.stress_band) == (3, 0.15)
    assert build(config_data(sweep={"stress_top": 0})).sweep.stress_band is None
    rejected(config_data(sweep={"stress_top": 0, "stress_band": 0.2}), "", "would change nothing")
    rejected(config_data(sweep={"stress_top": 1}), "", "give 2 or more")
    pareto = {"target": "pareto", "pareto_objectives": ["throughput_per_gpu", "throughput_per_user"]}
    rejected(config_data(goal=pareto, sweep={"stress_top": 3}), "", "a front, not a first")
    assert build(config_data(goal=pareto)).sweep.stress_top == 0
