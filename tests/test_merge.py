"""Merge tables: one row per replayed deployment, ties shown, what was replayed named."""

from spica_lib.results.merge import CandidateRow, frame, same_result_as
from spica_lib.trial.score import Candidate


def row(key, score, router="round_robin", metrics=None, gpus=2, **extra):
    candidate = Candidate(
        config={"router_mode": router, "used_gpus": gpus},
        used_gpus=gpus,
        score=score,
        metrics=metrics or {"mean_ttft_ms": 100.0},
        objectives=None,
    )
    return CandidateRow(key=key, branch="agg", round=0, candidate=candidate, average_gpus=float(gpus), **extra)


def test_rows_with_identical_results_point_at_the_first_of_them():
    rows = [row("a", 9.0), row("b", 9.0), row("c", 8.0), row("d", 9.0, gpus=4), row("e", 9.0)]
    assert same_result_as(rows) == [None, 1, None, None, 1]
    assert same_result_as([row("a", 9.0), row("b", 9.0, metrics={"mean_ttft_ms": 101.0})]) == [None, None]
    # How fast the simulator ran is not a property of the deployment.
    fast = {"mean_ttft_ms": 100.0, "wall_time_ms": 26.0}
    slow = {"mean_ttft_ms": 100.0, "wall_time_ms": 44.0, "planner_total_ticks": 5.0}  # a planner that never scaled
    assert same_result_as([row("a", 9.0, metrics=fast), row("b", 9.0, metrics=slow)]) == [None, 1]
    # Two replays of one deployment: their means differ in the last digits (Dynamo's summation order), as
    # two deployments one knob apart did on a real trace; a real difference in the 8th digit still counts.
    last_digits = {"mean_ttft_ms": 738.3958640334585, "completed_requests": 12031.0}
    twin = {"mean_ttft_ms": 738.3958640334621, "completed_requests": 12031.0}
    apart = {"mean_ttft_ms": 738.3958690334585, "completed_requests": 12031.0}
    assert same_result_as([row("a", 9.0, metrics=last_digits), row("b", 9.0 + 3e-15, metrics=twin),
                           row("c", 9.0, metrics=apart)]) == [None, 1, None]  # fmt: skip


def test_ranked_table_names_the_replayed_router_the_selection_count_and_the_ties():
    fallback = "kv_router with a single worker/DP rank per role replayed as round_robin (nothing to choose)"
    rows = [row("a", 9.0, selections=3, notes=[fallback]), row("b", 9.0, router="kv_router")]
    table = frame(rows, with_rank=True)
    assert list(table["config_router_mode"]) == ["round_robin", "kv_router"]
    assert list(table["selections"]) == [3, 1] and table["notes"][0] == fallback
    assert table["same_result_as"].isna()[0] and table["same_result_as"][1] == 1
    assert "same_result_as" not in frame(rows).columns  # candidates.parquet is in branch order, not ranked
