"""The confirm-and-solve-again loop (spica_lib/fleet/plan.py), with a scripted confirmer standing in for replays.

The confirmer is a fake on purpose: these tests check our own control flow (which deployments are
replayed, at what share, what is dropped and solved again); the real replays are the end-to-end test's.
"""

from __future__ import annotations

import pytest

from spica_lib.fleet.plan import ConfirmOutcome, FleetPlan, plan_fleet
from spica_lib.fleet.split import SplitCandidate, SplitChoice, SplitDemand


def candidate(key: str, capacity: float, gpus: dict[str, int], price: float) -> SplitCandidate:
    return SplitCandidate(key=key, capacity_rps=capacity, gpus=gpus, usd_per_hour=price)


def demands() -> list[SplitDemand]:
    big = SplitDemand(name="big", offered_rps=10.0, headroom=0.1,
                      candidates=[candidate("big-h200", 12.0, {"h200": 2}, 7.0)])  # fmt: skip
    small = SplitDemand(name="small", offered_rps=10.0, headroom=0.1,
                        candidates=[candidate("small-h100", 6.0, {"h100": 1}, 2.5),
                                    candidate("small-h100-tp2", 12.0, {"h100": 2}, 5.5)])  # fmt: skip
    return [big, small]


class ScriptedConfirmer:
    """Fake confirmer: misses the SLA for the keys it is told to, records every call."""

    def __init__(self, missing: set[str]):
        self.missing = missing
        self.calls: list[tuple[str, str, int, float]] = []

    def __call__(self, model: str, choice: SplitChoice, rate: float) -> ConfirmOutcome:
        self.calls.append((model, choice.candidate.key, choice.replicas, rate))
        met = 0 if choice.candidate.key in self.missing else 3
        return ConfirmOutcome(rate_rps=rate, samples=3, met=met)


def test_every_chosen_deployment_is_replayed_at_its_share_with_headroom() -> None:
    confirmer = ScriptedConfirmer(missing=set())
    plan = plan_fleet("f", demands(), {"h200": 2, "h100": 4}, "min_cost", confirmer)
    assert plan.feasible and plan.solves == 1 and not plan.dropped
    calls = {(m, k, n): rate for m, k, n, rate in confirmer.calls}
    assert calls == {("big", "big-h200", 1): pytest.approx(11.0), ("small", "small-h100", 2): pytest.approx(5.5)}
    assert plan.inventory_left == {"h200": 0, "h100": 2}
    assert plan.usd_per_hour == pytest.approx(12.0)
    # The naive split hands "big" one H200: it fails there, so there is nothing to save against.
    assert plan.naive is not None and plan.naive.fails == ["big"] and plan.naive.gpus_saved is None
    FleetPlan.model_validate_json(plan.model_dump_json())  # fleet.json reads back


def test_a_deployment_that_misses_on_its_confirming_replays_is_dropped_and_the_split_solved_again() -> None:
    confirmer = ScriptedConfirmer(missing={"small-h100"})
    plan = plan_fleet("f", demands(), {"h200": 2, "h100": 4}, "min_cost", confirmer)
    assert plan.feasible and plan.solves == 2
    assert [(d.model, d.key) for d in plan.dropped] == [("small", "small-h100")]
    chosen = {d.model: (d.key, d.replicas) for d in plan.deployments}
    assert chosen == {"big": ("big-h200", 1), "small": ("small-h100-tp2", 1)}
    assert all(d.confirmed is not None and d.confirmed.holds for d in plan.deployments)
    # "big" at one replica was confirmed once, not again after the second solve.
    assert [c[:3] for c in confirmer.calls].count(("big", "big-h200", 1)) == 1


def test_no_split_left_after_the_drops_is_said_so() -> None:
    confirmer = ScriptedConfirmer(missing={"big-h200"})
    plan = plan_fleet("f", demands(), {"h200": 2, "h100": 4}, "min_cost", confirmer)
    assert not plan.feasible and "big" in (plan.message or "")
    assert [d.key for d in plan.dropped] == ["big-h200"]


def test_against_a_naive_split_that_serves_everyone_the_savings_are_counted() -> None:
    # Rates 1 and 3 split 4 H200 + 4 H100 as 1+1 and 3+3. "b" is cheapest on four H200 (6 $/h), which its
    # share of three cannot hold, so alone it pays 7.5 $/h on three H100; the solved plan gives it the four.
    a = SplitDemand(name="a", offered_rps=1.0, headroom=0.0,
                    candidates=[candidate("a-h100", 1.0, {"h100": 1}, 2.5)])  # fmt: skip
    b = SplitDemand(name="b", offered_rps=3.0, headroom=0.0,
                    candidates=[candidate("b-h100", 1.0, {"h100": 1}, 2.5),
                                candidate("b-h200x4", 3.0, {"h200": 4}, 6.0)])  # fmt: skip
    plan = plan_fleet("f", [a, b], {"h200": 4, "h100": 4}, "min_cost", ScriptedConfirmer(set()))
    assert plan.usd_per_hour == pytest.approx(8.5)
    assert plan.naive is not None and plan.naive.fails == []
    assert plan.naive.usd_per_hour == pytest.approx(10.0)
    assert plan.naive.usd_per_hour_saved == pytest.approx(1.5)
    assert plan.naive.gpus_saved == -1  # cheaper, on one GPU more


def test_the_report_says_the_plan_the_binding_and_the_naive_split(tmp_path) -> None:  # noqa: ANN001
    from spica_lib.base.artifacts import write_model
    from spica_lib.fleet.plan import no_plan
    from spica_lib.fleet.report import fleet_markdown

    plan = plan_fleet("f", demands(), {"h200": 2, "h100": 4}, "min_cost", ScriptedConfirmer(missing={"small-h100"}))
    text = fleet_markdown(plan)
    assert "| big | " in text and "| small | " in text
    assert "inventory left: 2 x h100" in text
    assert "Dropped after missing the SLA" in text and "Against the naive split" in text
    assert "The naive split fails ['big']" in text
    write_model(tmp_path / "fleet.json", plan)
    assert no_plan(str(tmp_path / "fleet.json")) is None
    none = plan_fleet("f", demands(), {"h200": 1, "h100": 1}, "min_cost", ScriptedConfirmer(set()))
    assert "**No plan**" in fleet_markdown(none)
    write_model(tmp_path / "none.json", none)
    assert "no fleet plan" in (no_plan(str(tmp_path / "none.json")) or "")
