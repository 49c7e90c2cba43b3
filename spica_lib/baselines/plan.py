"""Which deployments the baselines are, and which of them need a replay.

- aiconfigurator: its own pick (`aiconfigurator_pick`), replayed with round robin and no planner
  (it chooses neither), the engines' other limits at the search space's first choice.
- no_planner / default_router: the best deployment without the feature. That is the better of
  the best trial the search replayed without it, and the winner replayed with it switched off
  (planner disabled; router round robin, Dynamo's default). When the winner already runs without
  it, the winner is its own baseline; when the search space never offers it, there is nothing to
  compare and the baseline says so.

Every replay is prepared from the run's own config, so it gets exactly the search's workload and SLA.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from spica_lib.baselines.model import LABELS, AiconfiguratorPick, Baseline
from spica_lib.config import SmartSearchConfig
from spica_lib.config.knobs import KNOBS, role_field
from spica_lib.config.presets import CompositeEntry, scaling_policy
from spica_lib.facts.catalog import resolve_backend_version
from spica_lib.facts.kv_capacity import KvEstimator
from spica_lib.facts.parallel import on_sku
from spica_lib.pools.knobs import branch_knob_choices
from spica_lib.trial.describe import describe
from spica_lib.trial.evaluate import prepare_trial
from spica_lib.trial.spec import TrialRecord, TrialResult, TrialSpec

DEFAULT_ROUTER = "round_robin"  # Dynamo's frontend routes round robin unless told otherwise
BATCH = KNOBS["max_num_seqs"]  # the engine limit aiconfigurator's pick sizes per role (its batch size)
NO_PLANNER = "disabled"
BASELINE_SUFFIX = "+baseline"  # a baseline's replay in the journal: "<trial key>+baseline" (never pruned)


def baseline_name(key: str) -> str:
    """A baseline replay's journal name: apart from the search's "<key>", whose replay a bar may have pruned."""
    return f"{key}{BASELINE_SUFFIX}"


def pick_replay(
    config: SmartSearchConfig, pick: AiconfiguratorPick, predictor_winners: dict[float, CompositeEntry]
) -> TrialSpec | None:
    """The spec aiconfigurator's pick is replayed as (None: no pick, or it cannot be built). It needs only the
    config, so a branch's finish share can replay it while another branch searches (results/finish_share.py)."""
    return _aiconfigurator(config, pick, _builder(config, predictor_winners), {}).replay


class BaselineCase(NamedTuple):
    """A baseline before its replay: its record so far, and the spec to replay (None: nothing to replay)."""

    baseline: Baseline
    replay: TrialSpec | None = None


def scored(result: TrialResult | None) -> float:
    """A result's score for comparing baselines: unscored results rank below every scored one."""
    return (
        result.score
        if result is not None and result.status == "feasible" and result.score is not None
        else float("-inf")
    )


def plan_baselines(
    config: SmartSearchConfig,
    records: dict[str, TrialRecord],
    ranked: list[str],
    pick: AiconfiguratorPick,
    predictor_winners: dict[float, CompositeEntry],
) -> list[BaselineCase]:
    """The three baselines of a run; `ranked` is the final ranking's trial keys, best first."""
    build = _builder(config, predictor_winners)
    winner = records[ranked[0]] if ranked else None
    space = config.search_space
    return [
        _aiconfigurator(config, pick, build, records),
        _without(
            "no_planner", winner, records, ranked, build,
            offered=any(scaling_policy(p).scales for p in space.planner_scaling_policy),
            uses=lambda sample: scaling_policy(sample.get("planner_scaling_policy", NO_PLANNER)).scales,
            off={"planner_scaling_policy": NO_PLANNER},
        ),
        _without(
            "default_router", winner, records, ranked, build,
            offered=set(space.router_mode) != {DEFAULT_ROUTER},
            uses=lambda sample: sample.get("router_mode", DEFAULT_ROUTER) != DEFAULT_ROUTER,
            off={"router_mode": DEFAULT_ROUTER},
        ),
    ]  # fmt: skip


Builder = Callable[[dict[str, Any], Any], TrialSpec]


def _builder(config: SmartSearchConfig, predictor_winners: dict[float, CompositeEntry]) -> Builder:
    space = config.search_space
    versions: dict[str, str | None] = {}

    def build(selection: dict[str, Any], layout: Any) -> TrialSpec:
        backend = selection["backend"]
        version = versions.setdefault(backend, resolve_backend_version(space.hardware_sku, backend))
        if version is None:
            raise ValueError(f"no perf database for backend {backend} on {space.hardware_sku}")
        estimator = KvEstimator(space.model_name, space.hardware_sku, {backend: version})
        return prepare_trial(
            config, selection, layout, backend_version=version, estimator=estimator, predictor_winners=predictor_winners
        )

    return build


def _aiconfigurator(
    config: SmartSearchConfig, pick: AiconfiguratorPick, build: Builder, records: dict[str, TrialRecord]
) -> BaselineCase:
    name = "aiconfigurator"
    if pick.problem is not None or pick.parallel_config is None:
        return BaselineCase(Baseline(name=name, label=LABELS[name], source="none", note=pick.problem))
    mode = pick.deployment_mode
    selection: dict[str, Any] = {"deployment_mode": mode, "backend": pick.backend}
    selection.update({knob: values[0] for knob, values in branch_knob_choices(config.search_space, mode).items()})
    selection.update({"router_mode": DEFAULT_ROUTER, "planner_scaling_policy": NO_PLANNER})
    selection.update({role_field(role, BATCH.name): seqs for role, seqs in pick.max_num_seqs.items()})
    space = config.search_space
    layout = pick.parallel_config
    if space.has_gpu_inventory:  # the pick was made on the inventory's largest GPU type (SearchSpace.largest_sku_space)
        layout = on_sku(layout, space.largest_sku_space().hardware_sku)
    try:
        spec = build(selection, layout)
    except Exception as exc:
        note = f"aiconfigurator's pick could not be built for the replay: {type(exc).__name__}: {exc}"
        return BaselineCase(Baseline(name=name, label=LABELS[name], source="none", note=note))
    note = (
        f"aiconfigurator {pick.aiconfigurator_version} picked it for ISL {pick.isl} / OSL {pick.osl} at "
        f"{pick.estimate.get('tokens/s/gpu', float('nan')):.0f} tokens/s/GPU by its own estimate"
        + (f"; replicas: {pick.sizing}" if pick.sizing else "")
    )
    if spec.key() in records:  # the search replayed this very deployment on the same traffic: no second replay
        return BaselineCase(_from_search(name, records[spec.key()], note=note + "; the search replayed it too"))
    baseline = Baseline(
        name=name, label=LABELS[name], source="replayed", key=spec.key(), deployment=describe(spec),
        spec=spec, note=note,
    )  # fmt: skip
    return BaselineCase(baseline, spec)


def _without(
    name: str,
    winner: TrialRecord | None,
    records: dict[str, TrialRecord],
    ranked: list[str],
    build: Builder,
    *,
    offered: bool,
    uses: Callable[[dict[str, Any]], bool],
    off: dict[str, Any],
) -> BaselineCase:
    label = LABELS[name]
    if winner is None:
        return BaselineCase(Baseline(name=name, label=label, source="none", note="the search found no deployment"))
    if not offered or not uses(winner.spec.sample):
        why = "the search space never offers it" if not offered else "the winner itself runs without it"
        return BaselineCase(_from_search(name, winner, note=why))
    searched = next((records[key] for key in ranked if not uses(records[key].spec.sample)), None)
    try:
        ablated = build({**winner.spec.selection, **off}, winner.spec.parallel_config)
    except Exception as exc:
        note = f"the winner could not be rebuilt without it ({type(exc).__name__}: {exc})"
        return BaselineCase(
            _from_search(name, searched, note=note)
            if searched
            else Baseline(name=name, label=label, source="none", note=note)
        )
    if ablated.key() in records and records[ablated.key()].result.status != "pruned":  # replayed it in full
        known = records[ablated.key()]
        best = known if searched is None or scored(known.result) >= scored(searched.result) else searched
        return BaselineCase(_from_search(name, best, note="the best the search replayed without it"))
    baseline = Baseline(
        name=name, label=label, source="replayed", key=ablated.key(), deployment=describe(ablated),
        spec=ablated, note="the winner, replayed without it",
        searched_alternative=searched.key if searched is not None else None,
    )  # fmt: skip
    return BaselineCase(baseline, ablated)


def _from_search(name: str, record: TrialRecord, note: str) -> Baseline:
    return Baseline(
        name=name, label=LABELS[name], source="search", key=record.key, deployment=describe(record.spec),
        spec=record.spec, result=record.result, note=note,
    )  # fmt: skip


def settle(case: BaselineCase, result: TrialResult, records: dict[str, TrialRecord]) -> Baseline:
    """The baseline once its replay is in: the replay, or the search's own trial when that scored better."""
    baseline = case.baseline.model_copy(update={"result": result})
    if baseline.searched_alternative is None:
        return baseline
    searched = records[baseline.searched_alternative]
    if scored(searched.result) > scored(result):
        note = f"the best the search replayed without it (the winner replayed without it scored {_shown(result)})"
        return _from_search(baseline.name, searched, note=note)
    baseline.note += f" (the best the search replayed without it scored {_shown(searched.result)})"
    return baseline


def _shown(result: TrialResult) -> str:
    return f"{result.score:.4g}" if result.status == "feasible" and result.score is not None else result.status
