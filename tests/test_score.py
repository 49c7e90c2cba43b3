"""Objectives, signs, budget, ranking and the Pareto front."""

import math

import pytest

from spica_lib.config import OptimizationTarget as T
from spica_lib.results.ranking import pareto_front, rank
from spica_lib.trial.evaluate import over_budget
from spica_lib.trial.score import (
    Candidate,
    average_gpus,
    make_candidate,
    objective_value,
    objective_vector,
    signed_score,
)

REPORT = {
    "output_throughput_tok_s": 5000.0,
    "mean_e2e_latency_ms": 1200.0,
    "goodput_output_throughput_tok_s": 4000.0,
    "mean_output_token_throughput_per_user": 50.0,
    "gpu_hours": 2.0,
    "duration_ms": 1_800_000.0,  # half an hour, so 4 GPUs on average
}


def test_objectives_per_target():
    assert average_gpus(REPORT) == 4.0
    assert objective_value(REPORT, T.THROUGHPUT) == 5000
    assert objective_value(REPORT, T.E2E_LATENCY) == 1200
    assert objective_value(REPORT, T.GOODPUT) == 4000
    assert objective_value(REPORT, T.GOODPUT_PER_GPU) == 1000
    assert objective_value(REPORT, T.THROUGHPUT_PER_GPU) == 1250
    assert objective_value(REPORT, T.THROUGHPUT_PER_USER) == 50


@pytest.mark.parametrize(
    "missing", [{"gpu_hours": 0.0}, {"duration_ms": None}, {"gpu_hours": None, "duration_ms": None}]
)
def test_per_gpu_is_zero_without_gpu_time(missing):
    report = {**REPORT, **missing}
    report = {k: v for k, v in report.items() if v is not None}
    assert objective_value(report, T.THROUGHPUT_PER_GPU) == 0.0 and objective_value(report, T.GOODPUT_PER_GPU) == 0.0


def test_empty_report_defaults_to_worst():
    assert objective_value({}, T.THROUGHPUT) == 0 and objective_value({}, T.THROUGHPUT_PER_USER) == 0
    assert objective_value({}, T.E2E_LATENCY) == math.inf
    assert signed_score({}, T.E2E_LATENCY) == -math.inf and signed_score({}, T.THROUGHPUT) == 0


def test_signs():
    assert signed_score(REPORT, T.GOODPUT_PER_GPU) == 1000 and signed_score(REPORT, T.E2E_LATENCY) == -1200


def test_pareto_is_not_scalar():
    with pytest.raises(ValueError, match="several objectives"):
        objective_value(REPORT, T.PARETO)


def test_budget_gate_names_both_numbers_and_lets_an_exact_fit_through():
    assert over_budget(16, 32) is None and over_budget(32, 32) is None
    assert over_budget(64, 32) == "over gpu_budget: used_gpus=64 > gpu_budget=32"


def test_objective_vector_is_raw():
    assert objective_vector(REPORT, [T.THROUGHPUT_PER_GPU, T.E2E_LATENCY]) == {
        "throughput_per_gpu": 1250,
        "e2e_latency": 1200,
    }


def test_make_candidate_scalar_and_pareto():
    scalar = make_candidate({"used_gpus": 8}, REPORT, T.GOODPUT_PER_GPU)
    assert (
        scalar.score == 1000
        and scalar.used_gpus == 8
        and scalar.metrics["gpu_hours"] == 2.0
        and scalar.objectives is None
    )
    pareto = make_candidate({"used_gpus": 4}, REPORT, T.PARETO, [T.THROUGHPUT_PER_GPU, T.THROUGHPUT_PER_USER])
    assert pareto.objectives == {"throughput_per_gpu": 1250, "throughput_per_user": 50} and pareto.score == 1250
    with pytest.raises(ValueError, match="pareto_objectives"):
        make_candidate({}, REPORT, T.PARETO)


def test_rank_best_first_ties_to_fewer_gpus():
    a = Candidate(config={}, used_gpus=8, score=10, metrics={})
    b = Candidate(config={}, used_gpus=4, score=10, metrics={})
    c = Candidate(config={}, used_gpus=2, score=12, metrics={})
    assert rank([a, b, c]) == [c, b, a]


def point(per_gpu, second, name="throughput_per_user"):
    return Candidate(
        config={}, used_gpus=1, score=per_gpu, metrics={}, objectives={"throughput_per_gpu": per_gpu, name: second}
    )


OBJ = [T.THROUGHPUT_PER_GPU, T.THROUGHPUT_PER_USER]


def test_front_respects_each_objectives_direction():
    def run(per_gpu, latency):
        return point(per_gpu, latency, name="e2e_latency")

    # Lower latency is better: (10, 100) dominates (10, 200); (20, 300) trades latency for throughput.
    front = pareto_front([run(10, 200), run(10, 100), run(20, 300), run(5, 400)], [T.THROUGHPUT_PER_GPU, T.E2E_LATENCY])
    assert [(c.objectives["throughput_per_gpu"], c.objectives["e2e_latency"]) for c in front] == [(10, 100), (20, 300)]


def test_front_drops_dominated_and_sorts_along_the_last_objective():
    front = pareto_front([point(100, 40), point(150, 25), point(180, 12), point(120, 20), point(90, 10)], OBJ)
    assert [(c.objectives["throughput_per_gpu"], c.objectives["throughput_per_user"]) for c in front] == [
        (180, 12),
        (150, 25),
        (100, 40),
    ]


def test_front_ignores_candidates_without_objectives_and_keeps_ties():
    plain = Candidate(config={}, used_gpus=1, score=999, metrics={})
    assert pareto_front([plain, point(1, 1), point(1, 1)], OBJ) == [point(1, 1), point(1, 1)]
