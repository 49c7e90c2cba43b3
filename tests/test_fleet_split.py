"""The fleet split (spica_lib/fleet/split.py) on constructed frontiers whose optimum is known or brute-forced."""

from __future__ import annotations

import itertools
import random

import pytest

from spica_lib.fleet.split import (
    SplitCandidate,
    SplitDemand,
    binding_constraints,
    naive_split,
    replica_bound,
    solve_split,
)


def candidate(key: str, capacity: float, gpus: dict[str, int], price: float) -> SplitCandidate:
    return SplitCandidate(key=key, capacity_rps=capacity, gpus=gpus, usd_per_hour=price)


def two_models() -> list[SplitDemand]:
    big = SplitDemand(
        name="big",
        offered_rps=10.0,
        headroom=0.2,  # needs 12 req/s
        candidates=[
            candidate("a-h100", 5.0, {"h100": 1}, 2.5),  # 3 replicas: 7.5 $/h
            candidate("a-h200", 13.0, {"h200": 2}, 7.0),  # 1 replica: 7.0 $/h
        ],
    )
    small = SplitDemand(
        name="small",
        offered_rps=4.0,
        headroom=0.0,
        candidates=[
            candidate("b-h200", 4.0, {"h200": 1}, 3.5),
            candidate("b-h100", 2.0, {"h100": 1}, 2.5),  # 2 replicas: 5.0 $/h
        ],
    )
    return [big, small]


def brute_force_cost(demands: list[SplitDemand], inventory: dict[str, int]) -> float | None:
    """The cheapest plan by trying every (candidate, replicas) per model: the solver's independent check."""
    options = []
    for d in demands:
        opts = [(c, n) for c in d.candidates for n in range(1, replica_bound(c, inventory) + 1)
                if c.capacity_rps * n >= d.offered_rps * (1 + d.headroom) - 1e-9]  # fmt: skip
        options.append(opts)
    best = None
    for combo in itertools.product(*options):
        used = {sku: sum(c.gpus.get(sku, 0) * n for c, n in combo) for sku in inventory}
        if all(used[sku] <= inventory[sku] for sku in inventory):
            cost = sum(c.usd_per_hour * n for c, n in combo)
            best = cost if best is None else min(best, cost)
    return best


def test_min_cost_finds_the_joint_optimum_not_each_models_own_cheapest() -> None:
    # Alone, "big" is cheapest on the H200s (7.0); but then "small" pays 5.0 on H100s: 12.0.
    # Jointly "big" on three H100s (7.5) leaves an H200 for "small" (3.5): 11.0.
    demands = two_models()
    inventory = {"h200": 2, "h100": 8}
    plan = solve_split(demands, inventory, "min_cost")
    assert plan.feasible
    chosen = {c.model: (c.candidate.key, c.replicas) for c in plan.choices}
    assert chosen == {"big": ("a-h100", 3), "small": ("b-h200", 1)}
    assert plan.usd_per_hour == pytest.approx(11.0)
    assert plan.gpus_used() == {"h100": 3, "h200": 1}


def test_min_cost_matches_brute_force_on_random_frontiers() -> None:
    rng = random.Random(7)
    for _ in range(25):
        inventory = {"h200": rng.randint(1, 6), "h100": rng.randint(1, 10)}
        demands = []
        for m in range(3):
            cands = []
            for c in range(3):
                sku = rng.choice(["h200", "h100"])
                gpus = rng.choice([1, 2, 4])
                cands.append(candidate(f"m{m}c{c}", rng.uniform(1, 10), {sku: gpus}, gpus * rng.uniform(2, 4)))
            demands.append(SplitDemand(name=f"m{m}", offered_rps=rng.uniform(1, 12), headroom=0.1, candidates=cands))
        expected = brute_force_cost(demands, inventory)
        plan = solve_split(demands, inventory, "min_cost")
        if expected is None:
            assert not plan.feasible
        else:
            assert plan.feasible and plan.usd_per_hour == pytest.approx(expected)
            for sku, used in plan.gpus_used().items():
                assert used <= inventory[sku]


def test_max_min_headroom_spreads_the_inventory_then_is_cheapest() -> None:
    # Two identical models on 4 GPUs of one type, each replica 5 req/s at rate 5: 2+2 gives both 100 %;
    # 3+1 would leave one at 0 %.
    demands = [
        SplitDemand(name=name, offered_rps=5.0, headroom=0.0, candidates=[candidate(f"{name}-1", 5.0, {"h100": 1}, 2.0)])
        for name in ("a", "b")
    ]
    plan = solve_split(demands, {"h100": 4}, "max_min_headroom")
    assert plan.feasible
    assert [c.replicas for c in plan.choices] == [2, 2]
    assert plan.min_headroom == pytest.approx(1.0)
    binding = binding_constraints(demands, {"h100": 4}, "max_min_headroom", plan)
    assert "inventory h100" in [b.constraint for b in binding]


def test_an_inventory_too_small_is_infeasible_and_said_so() -> None:
    demands = two_models()
    plan = solve_split(demands, {"h200": 1, "h100": 1}, "min_cost")
    assert not plan.feasible
    assert "no split" in (plan.message or "")


def test_a_model_with_no_candidate_that_fits_is_named() -> None:
    demands = two_models()
    plan = solve_split(demands, {"h200": 0, "h100": 0}, "min_cost")
    assert not plan.feasible and "big" in (plan.message or "") and "small" in (plan.message or "")


def test_the_naive_split_misses_an_sla_the_plan_meets() -> None:
    # "big" needs two H200 per replica; a proportional split (equal rates) hands each model one H200.
    big = SplitDemand(name="big", offered_rps=10.0, headroom=0.1,
                      candidates=[candidate("big-h200", 12.0, {"h200": 2}, 7.0)])  # fmt: skip
    small = SplitDemand(name="small", offered_rps=10.0, headroom=0.1,
                        candidates=[candidate("small-h100", 6.0, {"h100": 1}, 2.5),
                                    candidate("small-h200", 12.0, {"h200": 1}, 3.5)])  # fmt: skip
    inventory = {"h200": 2, "h100": 4}
    naive = {n.model: n for n in naive_split([big, small], inventory, "min_cost")}
    assert naive["big"].share == {"h200": 1, "h100": 2}
    assert not naive["big"].meets_sla and naive["big"].choice is None
    assert naive["small"].meets_sla
    plan = solve_split([big, small], inventory, "min_cost")
    assert plan.feasible
    chosen = {c.model: (c.candidate.key, c.replicas) for c in plan.choices}
    assert chosen == {"big": ("big-h200", 1), "small": ("small-h100", 2)}
    for c in plan.choices:
        assert c.headroom(10.0) >= 0.1


def test_min_cost_names_the_scarce_type_and_the_tight_headroom() -> None:
    demands = two_models()
    inventory = {"h200": 2, "h100": 8}
    plan = solve_split(demands, inventory, "min_cost")
    binding = {b.constraint: b.detail for b in binding_constraints(demands, inventory, "min_cost", plan)}
    # More H200 would let "big" take its cheaper H200 deployment too: the H200 count binds; H100s are left over.
    assert "inventory h200" in binding and "inventory h100" not in binding
    assert "headroom big" in binding  # 2 replicas of 5 req/s would not reach 12


def test_the_naive_shares_hand_out_every_gpu_in_proportion_to_the_rates() -> None:
    from spica_lib.fleet.split import proportional_shares

    demands = [SplitDemand(name=n, offered_rps=r, headroom=0.0, candidates=[]) for n, r in (("a", 4), ("b", 6), ("c", 10))]
    shares = proportional_shares(demands, {"h200": 4, "h100": 8})
    assert {sku: sum(s[sku] for s in shares.values()) for sku in ("h200", "h100")} == {"h200": 4, "h100": 8}
    assert shares == {"a": {"h200": 1, "h100": 2}, "b": {"h200": 1, "h100": 2}, "c": {"h200": 2, "h100": 4}}


def test_max_min_headroom_matches_brute_force_and_keeps_each_models_own_floor() -> None:
    rng = random.Random(11)
    for _ in range(20):
        inventory = {"h200": rng.randint(1, 5), "h100": rng.randint(1, 8)}
        demands = []
        for m in range(2):
            cands = [candidate(f"m{m}c{c}", rng.uniform(1, 8), {rng.choice(["h200", "h100"]): rng.choice([1, 2])}, 1.0)
                     for c in range(3)]  # fmt: skip
            demands.append(SplitDemand(name=f"m{m}", offered_rps=rng.uniform(1, 8), headroom=rng.choice([0.0, 0.3]),
                                       candidates=cands))  # fmt: skip
        best = None
        options = [[(c, n) for c in d.candidates for n in range(1, replica_bound(c, inventory) + 1)
                    if c.capacity_rps * n >= d.offered_rps * (1 + d.headroom) - 1e-9] for d in demands]  # fmt: skip
        for combo in itertools.product(*options):
            if all(sum(c.gpus.get(s, 0) * n for c, n in combo) <= inventory[s] for s in inventory):
                low = min(c.capacity_rps * n / d.offered_rps - 1 for (c, n), d in zip(combo, demands))
                best = low if best is None else max(best, low)
        plan = solve_split(demands, inventory, "max_min_headroom")
        assert plan.feasible == (best is not None)
        if best is not None:
            assert plan.min_headroom == pytest.approx(best, abs=1e-5)
            for choice in plan.choices:
                demand = next(d for d in demands if d.name == choice.model)
                assert choice.headroom(demand.offered_rps) >= demand.headroom - 1e-9
