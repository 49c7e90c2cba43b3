"""The split of one GPU inventory between models, solved exactly as a mixed-integer program (HiGHS).

Each model m has candidates c (a deployment with its capacity within the SLA, in req/s, its GPUs by
type and its price per hour). The plan picks one candidate per model and a replica count n >= 1:

    sum_c y[m,c] = 1                                   one deployment per model
    n[m,c] <= U[m,c] * y[m,c]                          replicas only of the chosen one
    sum_c cap[m,c] * n[m,c] >= (1 + t_m) * rate_m      its traffic served with headroom t_m
    sum_{m,c} gpus[m,c,s] * n[m,c] <= inventory[s]     every GPU type within its count

Replicas are assumed to add capacity linearly (a confirming replay checks it; see fleet/confirm.py).
`min_cost` fixes t_m at the required headroom and minimises the fleet's price per hour. `max_min_headroom`
makes t one variable, every model's headroom at least t (and at least its own required headroom),
maximises t, then, with t held at its optimum, minimises the price: of the plans with the largest
smallest headroom, the cheapest.

Pure functions over plain models; nothing here reads files or replays.
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field
from scipy.optimize import Bounds, LinearConstraint, milp

FleetGoal = Literal["min_cost", "max_min_headroom"]
HEADROOM_TOLERANCE = 1e-6  # the second stage of max_min_headroom keeps t within this of its optimum
MAX_HEADROOM = 100.0  # t's upper bound (100x the offered rate): keeps the first stage bounded


class SplitCandidate(BaseModel):
    """One deployment a model could run: what one replica serves within the SLA and what it takes."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    key: str  # the trial key in the model's run
    label: str = ""  # the layout, for people
    capacity_rps: float = Field(gt=0)
    gpus: dict[str, int]  # GPU type -> GPUs one replica takes
    usd_per_hour: float = Field(ge=0)


class SplitDemand(BaseModel):
    """One model's traffic and the headroom it must keep, with its candidates."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    name: str
    offered_rps: float = Field(gt=0)
    headroom: float = Field(ge=0)  # required: 0.2 serves 1.2x the offered rate within the SLA
    candidates: list[SplitCandidate]


class SplitChoice(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    model: str
    candidate: SplitCandidate
    replicas: int

    @property
    def capacity_rps(self) -> float:
        return self.candidate.capacity_rps * self.replicas

    @property
    def gpus(self) -> dict[str, int]:
        return {sku: count * self.replicas for sku, count in self.candidate.gpus.items()}

    @property
    def usd_per_hour(self) -> float:
        return self.candidate.usd_per_hour * self.replicas

    def headroom(self, offered_rps: float) -> float:
        return self.capacity_rps / offered_rps - 1.0


class SplitSolution(BaseModel):
    """The solver's answer: a choice per model, or why none exists."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    feasible: bool
    choices: list[SplitChoice] = Field(default_factory=list)
    min_headroom: float | None = None  # the smallest headroom of any model in the plan
    usd_per_hour: float | None = None
    message: str | None = None  # the solver's status, when infeasible

    def gpus_used(self) -> dict[str, int]:
        used: dict[str, int] = {}
        for choice in self.choices:
            for sku, count in choice.gpus.items():
                used[sku] = used.get(sku, 0) + count
        return used


def replica_bound(candidate: SplitCandidate, inventory: dict[str, int]) -> int:
    """The most replicas of `candidate` the inventory holds on its own (0: not even one)."""
    counts = [inventory.get(sku, 0) // need for sku, need in candidate.gpus.items() if need > 0]
    return min(counts) if counts else 0


def solve_split(demands: list[SplitDemand], inventory: dict[str, int], goal: FleetGoal) -> SplitSolution:
    """The optimal plan for `goal`, or an infeasible solution saying so."""
    columns = [(m, c) for m, d in enumerate(demands) for c in d.candidates if replica_bound(c, inventory) > 0]
    placed = {m for m, _ in columns}
    empty = [d.name for i, d in enumerate(demands) if i not in placed]
    if empty:
        return SplitSolution(feasible=False, message=f"no candidate of {empty} fits in the inventory {inventory}")
    if goal == "min_cost":
        solved = _solve(demands, inventory, columns, headroom_var=False)
    else:
        first = _solve(demands, inventory, columns, headroom_var=True, maximise_headroom=True)
        if first is None:
            solved = None
        else:
            best = first[2]
            solved = _solve(demands, inventory, columns, headroom_var=True, headroom_floor=best - HEADROOM_TOLERANCE)
    if solved is None:
        return SplitSolution(feasible=False, message="no split of the inventory serves every model with its headroom")
    replicas, _, _ = solved
    choices = [
        SplitChoice(model=demands[m].name, candidate=c, replicas=n) for (m, c), n in zip(columns, replicas) if n > 0
    ]
    headrooms = [ch.headroom(d.offered_rps) for d in demands for ch in choices if ch.model == d.name]
    return SplitSolution(
        feasible=True,
        choices=choices,
        min_headroom=min(headrooms),
        usd_per_hour=sum(ch.usd_per_hour for ch in choices),
    )


def _solve(
    demands: list[SplitDemand],
    inventory: dict[str, int],
    columns: list[tuple[int, SplitCandidate]],
    *,
    headroom_var: bool,
    maximise_headroom: bool = False,
    headroom_floor: float | None = None,
) -> tuple[list[int], list[int], float] | None:
    """(replicas per column, chosen per column, t) or None when infeasible.

    Variables: n (integer replicas, one per column), y (binary choice, one per column), then t (headroom).
    """
    k = len(columns)
    size = 2 * k + 1
    bounds_low = np.zeros(size)
    bounds_high = np.array([replica_bound(c, inventory) for _, c in columns] + [1] * k + [MAX_HEADROOM], dtype=float)
    integrality = np.array([1] * (2 * k) + [0])
    if headroom_var:
        bounds_low[-1] = max(headroom_floor if headroom_floor is not None else 0.0, 0.0)
    else:
        bounds_high[-1] = 0.0
    rows, low, high = [], [], []
    for m in range(len(demands)):
        row = np.zeros(size)
        row[[k + j for j, (i, _) in enumerate(columns) if i == m]] = 1
        rows.append(row), low.append(1), high.append(1)
    for j, (_, c) in enumerate(columns):
        row = np.zeros(size)
        row[j], row[k + j] = 1, -bounds_high[j]
        rows.append(row), low.append(-np.inf), high.append(0)
    for m, demand in enumerate(demands):
        served = np.zeros(size)
        for j, (i, c) in enumerate(columns):
            if i == m:
                served[j] = c.capacity_rps
        # Its own required headroom: cap . n >= rate (1 + required).
        rows.append(served), low.append(demand.offered_rps * (1 + demand.headroom)), high.append(np.inf)
        if headroom_var:  # and at least the fleet's smallest headroom t: cap . n - rate t >= rate
            above_t = served.copy()
            above_t[-1] = -demand.offered_rps
            rows.append(above_t), low.append(demand.offered_rps), high.append(np.inf)
    for sku, count in inventory.items():
        row = np.zeros(size)
        for j, (_, c) in enumerate(columns):
            row[j] = c.gpus.get(sku, 0)
        rows.append(row), low.append(-np.inf), high.append(count)
    objective = np.zeros(size)
    if maximise_headroom:
        objective[-1] = -1.0
    else:
        objective[:k] = [c.usd_per_hour for _, c in columns]
    result = milp(
        objective,
        constraints=LinearConstraint(np.array(rows), np.array(low), np.array(high)),
        integrality=integrality,
        bounds=Bounds(bounds_low, bounds_high),
    )
    if result.status != 0 or result.x is None:
        return None
    x = result.x
    replicas = [int(round(v)) for v in x[:k]]
    chosen = [int(round(v)) for v in x[k : 2 * k]]
    return replicas, chosen, float(x[-1])


class Binding(BaseModel):
    """A constraint that holds the plan where it is: relaxing it would improve the fleet goal."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    constraint: str  # "inventory h200_sxm", "headroom chat-32b"
    detail: str


def binding_constraints(
    demands: list[SplitDemand], inventory: dict[str, int], goal: FleetGoal, solution: SplitSolution
) -> list[Binding]:
    """Which constraints bind: each GPU type whose extra GPUs would improve the goal, each model whose
    required headroom (min_cost) or smallest headroom (max_min_headroom) sets the plan."""
    if not solution.feasible:
        return []
    found = []
    # One more replica of the largest candidate for every model: enough to move any goal a single GPU cannot.
    largest = max((n for d in demands for c in d.candidates for n in c.gpus.values()), default=1) * len(demands)
    for sku, count in inventory.items():
        relaxed = solve_split(demands, {**inventory, sku: count + largest}, goal)
        if relaxed.feasible and _better(goal, relaxed, solution):
            found.append(Binding(constraint=f"inventory {sku}", detail=_improvement(goal, sku, largest, relaxed, solution)))
    by_name = {d.name: d for d in demands}
    for choice in solution.choices:
        demand = by_name[choice.model]
        headroom = choice.headroom(demand.offered_rps)
        if goal == "min_cost":
            if demand.headroom <= 0:
                continue
            # Its required headroom binds when, without it, the fleet would cost less.
            loose = [d.model_copy(update={"headroom": 0.0}) if d.name == demand.name else d for d in demands]
            relaxed = solve_split(loose, inventory, goal)
            if relaxed.feasible and _better(goal, relaxed, solution):
                found.append(
                    Binding(
                        constraint=f"headroom {choice.model}",
                        detail=f"{100 * headroom:.0f} % kept, {100 * demand.headroom:.0f} % required; without it the "
                        f"fleet would cost {relaxed.usd_per_hour:.2f} $/h",
                    )
                )
        elif math.isclose(headroom, solution.min_headroom or 0.0, rel_tol=1e-6, abs_tol=1e-9):
            found.append(
                Binding(constraint=f"headroom {choice.model}", detail=f"the smallest headroom, {100 * headroom:.0f} %")
            )
    return found


def _better(goal: FleetGoal, relaxed: SplitSolution, solution: SplitSolution) -> bool:
    if goal == "min_cost":
        return (relaxed.usd_per_hour or 0.0) < (solution.usd_per_hour or 0.0) - 1e-9
    return (relaxed.min_headroom or 0.0) > (solution.min_headroom or 0.0) + 1e-6


def _improvement(goal: FleetGoal, sku: str, extra: int, relaxed: SplitSolution, solution: SplitSolution) -> str:
    if goal == "min_cost":
        return (
            f"all the {sku} the plan could use is used: {extra} more would cut the cost from "
            f"{solution.usd_per_hour:.2f} to {relaxed.usd_per_hour:.2f} $/h"
        )
    return (
        f"{extra} more {sku} would raise the smallest headroom from {100 * (solution.min_headroom or 0):.0f} % "
        f"to {100 * (relaxed.min_headroom or 0):.0f} %"
    )


def proportional_shares(demands: list[SplitDemand], inventory: dict[str, int]) -> dict[str, dict[str, int]]:
    """The naive split: each model gets each GPU type in proportion to its offered rate (whole GPUs, by
    largest remainders, so every GPU is handed out)."""
    total = sum(d.offered_rps for d in demands)
    shares: dict[str, dict[str, int]] = {d.name: {} for d in demands}
    for sku, count in inventory.items():
        # Largest remainders: each model its whole GPUs, then the GPUs left to the largest fractions.
        exact = {d.name: count * d.offered_rps / total for d in demands}
        for name, value in exact.items():
            shares[name][sku] = int(value)
        left = count - sum(shares[name][sku] for name in exact)
        for name in sorted(exact, key=lambda n: exact[n] - int(exact[n]), reverse=True)[:left]:
            shares[name][sku] += 1
    return shares


class NaiveModel(BaseModel):
    """One model planned alone on its proportional share of the inventory."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    model: str
    share: dict[str, int]
    choice: SplitChoice | None  # None: nothing within the share serves it with its headroom
    meets_sla: bool
    headroom: float | None  # what the best deployment within the share keeps (below required: fails)


def naive_split(demands: list[SplitDemand], inventory: dict[str, int], goal: FleetGoal) -> list[NaiveModel]:
    """Each model planned alone on its share: the cheapest plan meeting its headroom, else its largest headroom."""
    shares = proportional_shares(demands, inventory)
    found = []
    for demand in demands:
        share = shares[demand.name]
        alone = solve_split([demand], share, goal)
        if alone.feasible:
            choice = alone.choices[0]
            found.append(NaiveModel(model=demand.name, share=share, choice=choice, meets_sla=True,
                                    headroom=choice.headroom(demand.offered_rps)))  # fmt: skip
            continue
        # The most it can serve within its share: no headroom required, and below the offered rate allowed.
        best = _largest_capacity(demand, share)
        found.append(NaiveModel(model=demand.name, share=share, choice=best, meets_sla=False,
                                headroom=None if best is None else best.headroom(demand.offered_rps)))  # fmt: skip
    return found


def _largest_capacity(demand: SplitDemand, share: dict[str, int]) -> SplitChoice | None:
    best = None
    for candidate in demand.candidates:
        replicas = replica_bound(candidate, share)
        if replicas and (best is None or candidate.capacity_rps * replicas > best.capacity_rps):
            best = SplitChoice(model=demand.name, candidate=candidate, replicas=replicas)
    return best
