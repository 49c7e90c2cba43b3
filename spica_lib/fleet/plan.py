"""The fleet's plan: solve the split, confirm it by replays, drop what misses and solve again -> fleet.json.

Replicas are assumed to add capacity linearly until a confirming replay says otherwise: each chosen
deployment is replayed at its share of its model's traffic with the required headroom (the offered
rate x (1 + headroom) / replicas) on fresh samples; one that misses the SLA on any of them is taken
out of its model's candidates and the split is solved again, until every chosen deployment holds or
no split is left. The answer is compared with the naive plan (each model alone on a share of every
GPU type proportional to its offered rate).
"""

from __future__ import annotations

from collections.abc import Callable

from pydantic import BaseModel, ConfigDict, Field

from spica_lib.fleet.split import (
    Binding,
    FleetGoal,
    NaiveModel,
    SplitChoice,
    SplitDemand,
    binding_constraints,
    naive_split,
    solve_split,
)

SCHEMA_VERSION = 1


class ConfirmOutcome(BaseModel):
    """The confirming replays of one chosen deployment at its share of the traffic."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    rate_rps: float  # what one replica was replayed at
    samples: int
    met: int  # samples within the SLA
    reasons: list[str] = Field(default_factory=list)  # why the misses missed

    @property
    def holds(self) -> bool:
        return self.samples > 0 and self.met == self.samples


class PlannedDeployment(BaseModel):
    """One model's share of the fleet."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    model: str
    key: str
    label: str
    capacity_source: str = ""  # how its capacity was found (bisected, or the rate it met)
    replicas: int
    gpus: dict[str, int]  # GPU type -> GPUs, all replicas
    replica_capacity_rps: float
    capacity_rps: float
    offered_rps: float
    headroom: float  # capacity over offered, minus 1
    required_headroom: float
    usd_per_hour: float
    confirmed: ConfirmOutcome | None = None


class Dropped(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    model: str
    key: str
    replicas: int
    why: str


class NaiveComparison(BaseModel):
    """The naive plan next to the solved one."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    models: list[NaiveModel]
    fails: list[str]  # models the naive plan cannot serve with their headroom within their share
    gpus: int  # GPUs the naive plan uses (the models it serves; a failing one its whole share's best)
    usd_per_hour: float
    gpus_saved: int | None = None  # by the solved plan (None: the naive plan fails, nothing to compare)
    usd_per_hour_saved: float | None = None


class FleetPlan(BaseModel):
    """Artifact `fleet.json`: the split of the inventory between the models, confirmed by replays."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    schema_version: int = SCHEMA_VERSION
    run: str
    goal: FleetGoal
    inventory: dict[str, int]
    feasible: bool
    message: str | None = None  # why there is no plan
    deployments: list[PlannedDeployment] = Field(default_factory=list)
    inventory_left: dict[str, int] = Field(default_factory=dict)
    usd_per_hour: float | None = None
    min_headroom: float | None = None
    binding: list[Binding] = Field(default_factory=list)
    dropped: list[Dropped] = Field(default_factory=list)  # chosen once, missed its SLA on the confirming replays
    solves: int = 0
    naive: NaiveComparison | None = None


# (model, chosen deployment and replicas) -> its confirming replays.
Confirmer = Callable[[str, SplitChoice, float], ConfirmOutcome]


def plan_fleet(
    run: str,
    demands: list[SplitDemand],
    inventory: dict[str, int],
    goal: FleetGoal,
    confirm: Confirmer,
    sources: dict[str, str] | None = None,
) -> FleetPlan:
    """Solve, confirm each chosen deployment at its share (once per deployment and replica count), drop the
    misses, solve again; then the binding constraints and the naive comparison of the final plan."""
    current = list(demands)
    seen: dict[tuple[str, str, int], ConfirmOutcome] = {}
    dropped: list[Dropped] = []
    solves = 0
    while True:
        solution = solve_split(current, inventory, goal)
        solves += 1
        if not solution.feasible:
            return FleetPlan(run=run, goal=goal, inventory=inventory, feasible=False, message=solution.message,
                             dropped=dropped, solves=solves, naive=_naive(demands, inventory, goal, None))  # fmt: skip
        by_name = {d.name: d for d in current}
        missed = []
        for choice in solution.choices:
            place = (choice.model, choice.candidate.key, choice.replicas)
            if place not in seen:
                demand = by_name[choice.model]
                share = demand.offered_rps * (1 + demand.headroom) / choice.replicas
                seen[place] = confirm(choice.model, choice, share)
            if not seen[place].holds:
                missed.append(choice)
        if not missed:
            break
        for choice in missed:
            outcome = seen[(choice.model, choice.candidate.key, choice.replicas)]
            why = f"met the SLA on {outcome.met} of {outcome.samples} fresh samples at {outcome.rate_rps:.3g} req/s"
            dropped.append(Dropped(model=choice.model, key=choice.candidate.key, replicas=choice.replicas, why=why))
        gone = {(c.model, c.candidate.key) for c in missed}
        current = [
            d.model_copy(update={"candidates": [c for c in d.candidates if (d.name, c.key) not in gone]})
            for d in current
        ]
    by_name = {d.name: d for d in current}
    deployments = [
        PlannedDeployment(
            model=c.model,
            key=c.candidate.key,
            label=c.candidate.label,
            capacity_source=(sources or {}).get(c.candidate.key, ""),
            replicas=c.replicas,
            gpus=c.gpus,
            replica_capacity_rps=c.candidate.capacity_rps,
            capacity_rps=c.capacity_rps,
            offered_rps=by_name[c.model].offered_rps,
            headroom=c.headroom(by_name[c.model].offered_rps),
            required_headroom=by_name[c.model].headroom,
            usd_per_hour=c.usd_per_hour,
            confirmed=seen[(c.model, c.candidate.key, c.replicas)],
        )
        for c in solution.choices
    ]
    used = solution.gpus_used()
    return FleetPlan(
        run=run,
        goal=goal,
        inventory=inventory,
        feasible=True,
        deployments=deployments,
        inventory_left={sku: count - used.get(sku, 0) for sku, count in inventory.items()},
        usd_per_hour=solution.usd_per_hour,
        min_headroom=solution.min_headroom,
        binding=binding_constraints(current, inventory, goal, solution),
        dropped=dropped,
        solves=solves,
        naive=_naive(current, inventory, goal, solution),
    )


def _naive(demands: list[SplitDemand], inventory: dict[str, int], goal: FleetGoal, solution) -> NaiveComparison:  # noqa: ANN001
    models = naive_split(demands, inventory, goal)
    gpus = sum(sum(m.choice.gpus.values()) for m in models if m.choice is not None)
    cost = sum(m.choice.usd_per_hour for m in models if m.choice is not None)
    fails = [m.model for m in models if not m.meets_sla]
    comparison = NaiveComparison(models=models, fails=fails, gpus=gpus, usd_per_hour=cost)
    if solution is not None and solution.feasible and not fails:
        comparison.gpus_saved = gpus - sum(solution.gpus_used().values())
        comparison.usd_per_hour_saved = cost - (solution.usd_per_hour or 0.0)
    return comparison


def no_plan(path: str) -> str | None:
    """Why the fleet run at `path` (its fleet.json) has no plan, or None when it has one (or no fleet.json yet)."""
    from pathlib import Path

    from spica_lib.base.artifacts import read_model

    if not Path(path).is_file():
        return None
    plan = read_model(path, FleetPlan)
    return None if plan.feasible else f"no fleet plan ({path}): {plan.message}"
