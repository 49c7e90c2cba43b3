"""What becomes of one proposal before any replay: answered at once, a new trial, or moved to one.

A proposal is decoded and projected onto a layout of the branch's pool, then answered without a replay
when it can be: a backend that cannot run the layout or a layout the replay refused before
(`unsupported`), a layout over the GPU budget (`infeasible`), a spec that cannot be built (`failed`), a
trial the branch already has (`cached`) or one already replaying, in this pass or in a round in flight
(`duplicate`). Otherwise it is a `new` trial.

No stall: a proposal that lands on a deployment already replayed (cached or duplicate) is also *moved*,
to the first trial the branch has not taken yet (not replayed, not replaying in this pass or in a round in
flight, and one that would replay: in the budget, not refused, buildable), looked for in this order:
first its own layout with one searched knob changed (`knob_neighbours`: knob by knob, the nearest value
first), since a designer that asks again for a replayed point holds that point's region the best; then
its knobs on the layouts down the projection's own order (ParallelConfigProjector.nearest, from the point
the designer asked for). The proposal itself stays recorded as what it is (cached or
duplicate, told with that trial's result), and the move is a second entry, outcome `moved`, naming it
(`moved_from`), with the parameters of the layout it replays: the designer is told each point with the
result it really has. A designer that keeps proposing replayed layouts (NSGA-II in a small pool) thus
still adds a new trial per proposal, while one is left. The move depends only on the proposal and the
trials the round's files name, never on timing: the same seed and files give the same moves.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from spica_lib.config import SmartSearchConfig
from spica_lib.config.presets import CompositeEntry
from spica_lib.facts.kv_capacity import KvEstimator
from spica_lib.facts.parallel import ParallelConfig
from spica_lib.facts.replay_limits import is_layout_refusal
from spica_lib.search.history import Observation, Suggested
from spica_lib.search.space import BranchSpace, Selection
from spica_lib.trial.evaluate import over_budget, prepare_failure, prepare_trial
from spica_lib.trial.spec import TrialResult, TrialSpec


class SearchContext(BaseModel):
    """What every round of a run needs besides its branch."""

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)

    config: SmartSearchConfig
    predictor_winners: dict[float, CompositeEntry] = Field(default_factory=dict)
    estimator: KvEstimator | None = None


@dataclass
class Taken:
    """The trials a pass may not propose again: those the branch has (results, with where their files are),
    those this pass already chose, and those the rounds in flight replay; and the (layout, backend) pairs
    the replay refused."""

    known_keys: dict[str, Observation]
    known_results: dict[str, TrialResult]
    in_flight: dict[str, Suggested]
    refused: dict[tuple[str, str], str]
    pending: dict[str, TrialSpec] = field(default_factory=dict)


def refused_layouts(observations: list[Observation]) -> dict[tuple[str, str], str]:
    """(layout, backend) pairs whose replay failed for a reason the layout itself causes, with that reason."""
    return {
        (o.layout, o.backend): o.reason
        for o in observations
        if o.status == "failed" and o.layout and o.backend and is_layout_refusal(o.reason)
    }


def triage(
    context: SearchContext,
    space: BranchSpace,
    round_index: int,
    vizier_id: int,
    params: dict[str, Any],
    taken: Taken,
) -> tuple[Suggested, TrialSpec | None]:
    """The proposal's outcome, and its trial spec when it is a new trial (added to `taken.pending`)."""
    selection = space.decode(params)
    item, trial = _judge(context, space, round_index, vizier_id, params, selection, selection.parallel_config, taken)
    if trial is not None:
        taken.pending[trial.key()] = trial
    return item, trial


def move(
    context: SearchContext,
    space: BranchSpace,
    round_index: int,
    vizier_id: int,
    proposal: Suggested,
    taken: Taken,
) -> tuple[Suggested, TrialSpec] | None:
    """The nearest trial not taken yet for a proposal that landed on a taken one (None: none is left)."""
    selection = space.decode(proposal.params)
    for params in knob_neighbours(space, proposal.params):
        knobbed = space.decode(params)
        item, trial = _judge(context, space, round_index, vizier_id, params, knobbed, knobbed.parallel_config, taken)
        if trial is not None:
            return _moved(proposal, item, trial, taken)
    if space.projector is None or not space.features:
        return None  # one layout: nowhere else to move
    for projection in space.projector.nearest(proposal.params, selection.values["backend"]):
        if projection.config == selection.parallel_config:
            continue
        params = {**proposal.params, **space.layout_parameters(projection.config)}
        moved = Selection(values=selection.values, parallel_config=projection.config, projection=projection)
        item, trial = _judge(context, space, round_index, vizier_id, params, moved, projection.config, taken)
        if trial is None:
            continue  # taken too, or it would not replay: the next nearest
        return _moved(proposal, item, trial, taken)
    return None


def refine(
    context: SearchContext,
    space: BranchSpace,
    round_index: int,
    vizier_id: int,
    incumbent: Observation,
    taken: Taken,
) -> tuple[Suggested, TrialSpec] | None:
    """The branch's best trial with one knob changed, the nearest not taken yet (None: its knob line is done).

    A designer explores; this is the round's one step of local search around the best it has (a layout
    found with its knobs at their first values, as the warm start's seeds have them, is otherwise left
    there: the designer rarely asks for the same layout again with other knobs)."""
    for params in knob_neighbours(space, incumbent.params):
        selection = space.decode(params)
        item, trial = _judge(context, space, round_index, vizier_id, params, selection, selection.parallel_config, taken)
        if trial is not None and selection.parallel_config.label() == incumbent.layout:
            note = f"the branch's best so far (trial {(incumbent.key or '')[:12]}) with one knob changed"
            taken.pending[trial.key()] = trial
            return item.model_copy(update={"refines": incumbent.vizier_id, "reason": note}), trial
    return None


def knob_neighbours(space: BranchSpace, params: dict[str, Any]) -> list[dict[str, Any]]:
    """`params` with one searched knob (not the backend, whose layouts differ) set to another of its values:
    knob by knob in the space's order, each knob's values nearest in its list first (the lower on a tie)."""
    out = []
    for knob in space.knobs:
        if knob.name == "backend":
            continue
        values = list(knob.values)
        if knob.kind == "categorical":
            at = values.index(str(params[knob.name]))
        else:  # the nearest listed value (Vizier hands back floats)
            at = min(range(len(values)), key=lambda i: abs(values[i] - float(params[knob.name])))
        for index in sorted((i for i in range(len(values)) if i != at), key=lambda i: (abs(i - at), i)):
            out.append({**params, knob.name: values[index]})
    return out


def _moved(proposal: Suggested, item: Suggested, trial: TrialSpec, taken: Taken) -> tuple[Suggested, TrialSpec]:
    where = "replayed" if proposal.outcome == "cached" else "replaying"
    note = f"moved from {proposal.layout} (trial {proposal.key[:12]}, already {where} in round {proposal.trial_round})"
    taken.pending[trial.key()] = trial
    return item.model_copy(update={"outcome": "moved", "moved_from": proposal.vizier_id, "reason": note}), trial


def _judge(
    context: SearchContext,
    space: BranchSpace,
    round_index: int,
    vizier_id: int,
    params: dict[str, Any],
    selection: Selection,
    layout: ParallelConfig,
    taken: Taken,
) -> tuple[Suggested, TrialSpec | None]:
    base = {
        "vizier_id": vizier_id,
        "params": params,
        "selection": selection.values,
        "layout": layout.label(),
        "projection_distance": selection.projection.distance if selection.projection else None,
        "mode_projected": bool(selection.projection and selection.projection.mode_projected),
    }
    backend = selection.values["backend"]
    record = next((r for r in space.pool if r.config == layout), None)
    if record is None or backend not in record.backends:
        return Suggested(
            **base, outcome="unsupported", reason=f"backend '{backend}' does not support this parallel config"
        ), None
    if (base["layout"], backend) in taken.refused:
        why = taken.refused[(base["layout"], backend)]
        return Suggested(**base, outcome="unsupported", reason=f"the replay refused this layout earlier: {why}"), None
    over = over_budget(layout.total_gpus, space.spec.gpu_budget)
    if over:
        return Suggested(**base, outcome="infeasible", reason=over), None
    try:
        trial = prepare_trial(
            context.config,
            selection.values,
            layout,
            backend_version=space.spec.backend_versions[backend],
            estimator=context.estimator,
            predictor_winners=context.predictor_winners,
        )
    except Exception as exc:  # recorded like a failed replay, without one
        failure = prepare_failure(exc, layout.total_gpus)
        return Suggested(**base, outcome=failure.status, reason=failure.reason), None
    key = trial.key()
    if key in taken.known_results:
        earlier = taken.known_keys.get(key)
        place = {"trial_round": earlier.trial_round, "trial_batch": earlier.trial_batch} if earlier else {}
        return Suggested(**base, key=key, outcome="cached", **place), None
    if key in taken.pending:
        return Suggested(**base, key=key, outcome="duplicate", trial_round=round_index), None
    if key in taken.in_flight:  # another round replays it now; this round is told its result
        elsewhere = taken.in_flight[key]
        place = {"trial_round": elsewhere.trial_round, "trial_batch": elsewhere.trial_batch}
        return Suggested(**base, key=key, outcome="duplicate", **place), None
    return Suggested(**base, key=key, outcome="new", trial_round=round_index), trial
