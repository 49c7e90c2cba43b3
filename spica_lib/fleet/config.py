"""`FleetConfig`: one GPU inventory, its prices, and several models each with its own sweep config.

Each model's block is a single-sweep config (`SmartSearchConfig`) without hardware or prices: the
fleet's inventory becomes its `search_space.hardware` and the fleet's prices its `goal.gpu_hour_usd`,
so every model searches the whole inventory and is checked by the single config's own validators.
`load_fleet_config` is the whole gate, before any replay: the schema, each model's config (catalog,
policies, layouts), what the split needs of each model (a capacity within its SLA at one open-loop
arrival rate), and an inventory that holds each model's smallest runnable deployment, alone and all
together, else the shortfall.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import Field, ValidationError, field_validator, model_validator

from spica_lib.config import DEFAULT_CAPACITY_TOP, ConfigError, InputKind, SmartSearchConfig, read_input
from spica_lib.config.input_kind import wrong_kind_error
from spica_lib.config.policies import apply_policy_filters
from spica_lib.config.strict import StrictModel, problems_from
from spica_lib.config.validate import check_parsed_config
from spica_lib.facts.parallel import GPU_LADDER, ParallelConfig, role_configs
from spica_lib.pools.branches import NoViableParallelConfig, enumerate_branches
from spica_lib.results.capacity import offered_rps

MODEL_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,22}[a-z0-9])?$")  # a DNS label short enough for the DGD names
# A model block may not say what the fleet says for every model.
FLEET_OWNED = {
    "search_space": ("hardware", "hardware_sku", "gpu_budget"),
    "goal": ("gpu_hour_usd",),
}


class FleetModel(StrictModel):
    """One model of the fleet: its name, its required headroom and its single-sweep config blocks."""

    name: str
    # The share of extra load it must take within its SLA (0.2: 1.2x its offered rate); default: the fleet's.
    headroom: float | None = Field(default=None, ge=0)
    search_space: dict[str, Any]
    workload: dict[str, Any] | list[Any]
    goal: dict[str, Any] = Field(default_factory=dict)
    sweep: dict[str, Any] = Field(default_factory=dict)

    @field_validator("name")
    @classmethod
    def _dns_label(cls, name: str) -> str:
        if not MODEL_NAME.match(name):
            raise ValueError(
                f"{name!r} names the model's run folder and its deployments: use 1-24 lowercase letters, "
                "digits and '-', starting and ending with a letter or digit"
            )
        return name

    @model_validator(mode="after")
    def _fleet_owns_hardware_and_prices(self) -> FleetModel:
        for block, keys in FLEET_OWNED.items():
            given = [k for k in keys if k in getattr(self, block)]
            if given:
                raise ValueError(
                    f"{block}.{given[0]} is the fleet's: every model searches the fleet's inventory at its "
                    "prices (top-level inventory and gpu_hour_usd); remove it here"
                )
        if self.sweep.get("capacity_top") == 0:
            raise ValueError(
                "sweep.capacity_top 0: the split needs each model's capacity within its SLA; give at least 1, "
                "or leave it out"
            )
        return self

    def sweep_mapping(self, inventory: dict[str, int], prices: dict[str, float], capacity_top: int) -> dict[str, Any]:
        """This model's single-sweep config: its blocks with the fleet's inventory and prices put in
        (and `capacity_top` where the model does not give its own: the split needs capacities)."""
        sweep = dict(self.sweep)
        sweep.setdefault("capacity_top", capacity_top)
        return {
            "search_space": {**self.search_space, "hardware": dict(inventory)},
            "workload": self.workload,
            "goal": {**self.goal, "gpu_hour_usd": dict(prices)},
            "sweep": sweep,
        }


class FleetConfig(StrictModel):
    """A fleet request: which models share which GPUs, and what the split optimises."""

    inventory: dict[str, int]  # GPU type -> GPUs available
    gpu_hour_usd: dict[str, float]  # GPU type -> US$ per GPU-hour
    # min_cost: every model served with its headroom, at the lowest price per hour.
    # max_min_headroom: the largest smallest headroom the inventory gives (each at least its own), then the cheapest.
    goal: Literal["min_cost", "max_min_headroom"] = "min_cost"
    headroom: float = Field(default=0.0, ge=0)  # every model's required headroom unless it gives its own
    models: list[FleetModel] = Field(min_length=1)

    @field_validator("inventory")
    @classmethod
    def _counts(cls, inventory: dict[str, int]) -> dict[str, int]:
        bad = {sku: count for sku, count in inventory.items() if count < 1}
        if not inventory or bad:
            raise ValueError(f"the inventory maps each GPU type to the GPUs available (at least 1), got {inventory}")
        return inventory

    @model_validator(mode="after")
    def _priced_and_distinct(self) -> FleetConfig:
        unpriced = [sku for sku in self.inventory if sku not in self.gpu_hour_usd]
        if unpriced:
            raise ValueError(
                f"gpu_hour_usd prices {sorted(self.gpu_hour_usd)} but not {unpriced} of the inventory: "
                "add a price per GPU-hour for every GPU type (the split compares costs across types)"
            )
        stray = [sku for sku in self.gpu_hour_usd if sku not in self.inventory]
        if stray:
            raise ValueError(f"gpu_hour_usd prices {stray}, which the inventory does not hold: remove them")
        bad = {sku: p for sku, p in self.gpu_hour_usd.items() if not p > 0}
        if bad:
            raise ValueError(f"a GPU-hour price is a positive number of US dollars, got {bad}")
        names = [m.name for m in self.models]
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise ValueError(f"model names must be distinct; repeated: {repeated}")
        return self

    def required_headroom(self, model: FleetModel) -> float:
        return self.headroom if model.headroom is None else model.headroom


class FleetModelPlan(StrictModel):
    """A checked model: its validated single-sweep config, offered rate and smallest runnable deployment."""

    name: str
    headroom: float
    offered_rps: float
    config: SmartSearchConfig
    smallest_gpus: dict[str, int]  # GPU type -> GPUs of its smallest runnable layout
    smallest_label: str
    layouts: list[dict[str, int]]  # every runnable layout's GPUs by type (for the joint fit)


def load_fleet_config(path: str | Path) -> tuple[FleetConfig, list[FleetModelPlan]]:
    """Read and check a fleet config; raises ConfigError with every problem found, before any replay."""
    path = Path(path)
    source = str(path)
    kind, data = read_input(path)
    if kind is not InputKind.FLEET:
        raise wrong_kind_error(kind, InputKind.FLEET, source)
    try:
        fleet = FleetConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(problems_from(exc, FleetConfig), source=source, subject="fleet config") from None
    base_dir = path.resolve().parent
    problems: list[tuple[str, str]] = []
    plans = []
    for index, model in enumerate(fleet.models):
        where = f"models[{index}] ({model.name})"
        try:
            plans.append(_check_model(fleet, model, base_dir, source))
        except ConfigError as exc:
            problems += [(f"{where}.{p}" if p else where, message) for p, message in exc.problems]
    if not problems:
        problems += _joint_fit(fleet, plans)
    if problems:
        raise ConfigError(problems, source=source, subject="fleet config")
    return fleet, plans


def _check_model(fleet: FleetConfig, model: FleetModel, base_dir: Path, source: str) -> FleetModelPlan:
    # Read once without a capacity bisection, so that a model that cannot have one is told why in the
    # split's words (not as a capacity_top it never wrote); then with the bisection the split needs.
    def read(capacity_top: int) -> SmartSearchConfig:
        mapping = model.sweep_mapping(fleet.inventory, fleet.gpu_hour_usd, capacity_top)
        return SmartSearchConfig.from_mapping(mapping, base_dir=base_dir, source=source)

    config = read(0 if "capacity_top" not in model.sweep else model.sweep["capacity_top"])
    problem = config.why_no_capacity()
    if problem is None and config.workloads:
        problem = "several workloads have no one arrival rate to split"
    rate = offered_rps(config) if problem is None else None
    if problem is None and not rate:
        problem = "its workload has no arrival rate"
    if problem is not None:
        raise ConfigError([("", f"the split sizes each model by its capacity within its SLA, but {problem}")])
    config = read(DEFAULT_CAPACITY_TOP)
    check_parsed_config(config, source)
    layouts = _runnable_layouts(config)
    sku = config.search_space.hardware_sku
    price = {sku: fleet.gpu_hour_usd[sku] for sku in fleet.inventory}
    smallest = min(layouts, key=lambda c: (c.total_gpus, sum(price[s] * n for s, n in gpus_by_type(c, sku).items())))
    return FleetModelPlan(
        name=model.name,
        headroom=fleet.required_headroom(model),
        offered_rps=float(rate),
        config=config,
        smallest_gpus=gpus_by_type(smallest, sku),
        smallest_label=smallest.label(),
        layouts=[gpus_by_type(c, sku) for c in layouts],
    )


def gpus_by_type(layout: ParallelConfig, sku: str) -> dict[str, int]:
    """GPU type -> GPUs a layout takes; `sku` is the type of roles without one (an inventory of one type)."""
    found: dict[str, int] = {}
    for replica in role_configs(layout).values():
        found[replica.sku or sku] = found.get(replica.sku or sku, 0) + replica.total_gpus
    return found


def _runnable_layouts(config: SmartSearchConfig) -> list[ParallelConfig]:
    """Every layout the model's branches can run on the inventory; else the shortfall, as a ConfigError."""
    try:
        branches = enumerate_branches(config, apply_policy_filters(config).kept)
    except NoViableParallelConfig as error:
        raise ConfigError(_shortfall(config) or error.problems) from None
    return [record.config for branch in branches for record in branch.pool]


def _shortfall(config: SmartSearchConfig) -> list[tuple[str, str]] | None:
    """What the inventory lacks for each listed mode's smallest runnable layout (None: more GPUs would not help)."""
    space = config.search_space
    inventory = space.inventory()
    if space.has_gpu_inventory:
        larger = {"hardware": {sku: max(GPU_LADDER) for sku in inventory}}
    else:
        larger = {"gpu_budget": max(GPU_LADDER)}
    roomy = config.model_copy(update={"search_space": space.model_copy(update=larger)})
    try:
        branches = enumerate_branches(roomy, apply_policy_filters(roomy).kept)
    except NoViableParallelConfig:
        return None
    problems = []
    for branch in branches:
        if not branch.pool:
            continue
        smallest = min((r.config for r in branch.pool), key=lambda c: c.total_gpus)
        needs = gpus_by_type(smallest, space.hardware_sku)
        if all(inventory.get(sku, 0) >= n for sku, n in needs.items()):
            continue
        short = ", ".join(f"{n - inventory.get(sku, 0)} x {sku}" for sku, n in needs.items() if n > inventory.get(sku, 0))
        problems.append(
            (
                "search_space.deployment_mode",
                f"{branch.spec.deployment_mode!r}: the inventory {inventory} cannot hold {space.model_name}'s "
                f"smallest runnable {branch.spec.deployment_mode} deployment, {smallest.label()} "
                f"({smallest.total_gpus} GPUs); short by {short}: add GPUs, or remove the mode",
            )
        )
    return problems or None


def _joint_fit(fleet: FleetConfig, plans: list[FleetModelPlan]) -> list[tuple[str, str]]:
    """Every model needs one replica of some layout at once: can the inventory hold one of each together?"""
    from spica_lib.fleet.split import SplitCandidate, SplitDemand, solve_split

    demands = [
        SplitDemand(
            name=plan.name,
            offered_rps=1.0,
            headroom=0.0,
            candidates=[
                SplitCandidate(key=str(i), capacity_rps=1.0, gpus=gpus, usd_per_hour=float(sum(gpus.values())))
                for i, gpus in enumerate(dict.fromkeys(tuple(sorted(g.items())) for g in plan.layouts))
                for gpus in [dict(gpus)]
            ],
        )
        for plan in plans
    ]
    if solve_split(demands, fleet.inventory, "min_cost").feasible:
        return []
    needs = "; ".join(f"{p.name}: {p.smallest_label}" for p in plans)
    total = {sku: sum(p.smallest_gpus.get(sku, 0) for p in plans) for sku in fleet.inventory}
    return [
        (
            "inventory",
            f"{fleet.inventory} cannot hold one deployment of every model at once (smallest each: {needs}; "
            f"together {sum(total.values())} GPUs against {sum(fleet.inventory.values())}): add GPUs, or "
            "remove a model",
        )
    ]


def write_model_config(config: SmartSearchConfig, path: str | Path) -> None:
    """A model's single-sweep config as its own YAML (the model's run in the workflow reads it), atomically."""
    from spica_lib.base.artifacts import atomic_write_text

    data = config.model_dump(mode="json", exclude_none=True)
    if config.workloads:  # the parsed form of a workload list: written back as the list under workload
        data["workload"] = data.pop("workloads")
    atomic_write_text(path, yaml.safe_dump(data, sort_keys=False))
