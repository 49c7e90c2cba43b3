"""The search's artifact models: a round's suggestions, the observations told to Vizier, the branch history."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from spica_lib.config import OptimizationGoal
from spica_lib.search.metrics import designer_metrics
from spica_lib.search.warm_start import WarmStart
from spica_lib.trial.screen import PruneBar
from spica_lib.trial.spec import TrialResult

SCHEMA_VERSION = 1
Outcome = Literal["new", "moved", "duplicate", "cached", "unsupported", "infeasible", "failed"]
NEW_TRIAL = ("new", "moved")  # outcomes whose trial the suggestion's own pass replays (search/triage.py)
ObservedStatus = Literal["feasible", "infeasible", "failed", "timed_out", "unsupported", "cache_hit", "pruned"]


class Suggested(BaseModel):
    """One Vizier suggestion of a round and what became of it before any replay."""

    model_config = ConfigDict(extra="forbid")

    vizier_id: int
    params: dict[str, Any]
    selection: dict[str, Any] | None = None
    layout: str | None = None
    key: str | None = None
    outcome: Outcome
    reason: str | None = None
    projection_distance: float | None = None
    mode_projected: bool = False
    trial_round: int | None = None  # where the trial file is (new, duplicate, cached): its round (a duplicate:
    # this round's, or a round in flight's) ...
    trial_batch: int | None = None  # ... and the replay job of that round that wrote it
    warm_start: bool = False  # a seed of round 0 chosen by the static estimate, not by the designer
    # outcome "moved": the vizier_id of the proposal (cached or duplicate, in the same pass) this trial was moved from;
    # `params` are then the moved layout's, `projection_distance` its distance from the point that proposal asked for
    moved_from: int | None = None
    # A new trial that is the branch's best so far with one knob changed (search/triage.py `refine`): that
    # best's vizier_id. One per round, from round 1 on, when the round has room for the designer's too.
    refines: int | None = None


class RoundSuggestions(BaseModel):
    """Artifact `rounds/<branch>/<k>/suggestions.json` (the round's checkpoint), and of each refill pass of
    the round, `rounds/<branch>/<k>/refill/<p>/suggestions.json` (replacements for failed replays)."""

    model_config = ConfigDict(extra="forbid")

    schema_version: int = SCHEMA_VERSION
    deployment_mode: str
    round: int
    refill: int = 0  # 0: the round's first pass; p: its p-th pass of replacements
    first_batch: int = 0  # the round's replay jobs are numbered across its passes
    replaces: list[str] = Field(default_factory=list)  # a refill: the failed or timed-out trials it replaces
    skipped: str | None = None  # why the round has no work (branch skipped or stalled earlier)
    target: int
    attempts: int = 0
    optimizer_seconds: float = 0.0  # building, feeding and asking the designer (Vizier imports included)
    suggested: list[Suggested] = Field(default_factory=list)
    new_keys: list[str] = Field(default_factory=list)
    trials_per_job: int | None = None  # None: one replay job for all of the round's new trials
    warm_start: WarmStart | None = None  # round 0 with sweep.warm_start: how its seeds were chosen
    # sweep.rounds_in_flight > 1: the rounds still replaying when this pass was asked for. Their new trials
    # were the designer's active trials, and a suggestion of one of them is a duplicate of it.
    in_flight: list[int] = Field(default_factory=list)
    # A goodput goal: the sweep's k-th best score in the histories this round was suggested from; a trial of
    # the round whose score certainly stays below it is stopped and recorded `pruned` (replay/early_stop.py).
    # Fixed by the round (never by which replay finished first), so a seed still fixes the search.
    prune: PruneBar | None = None
    # From round 1: the CPU budget of a replay's prefix (replay/stall.py), from the slowest prefix of the same
    # histories. A time limit, fixed by the round like the bar.
    prefix_seconds: float | None = None

    def batches(self) -> list[list[str]]:
        """The new trials of each replay job of the pass, in order."""
        size = self.trials_per_job or max(1, len(self.new_keys))
        return [self.new_keys[start : start + size] for start in range(0, len(self.new_keys), size)]

    def batch_numbers(self) -> range:
        """The round-wide numbers of this pass's replay jobs (their folders under trials/)."""
        return range(self.first_batch, self.first_batch + len(self.batches()))

    def batch(self, number: int) -> list[str]:
        """The new trials of the pass's replay job with round-wide number `number`."""
        return self.batches()[number - self.first_batch]


class Observation(BaseModel):
    """A suggestion's final outcome, as told to the designer."""

    model_config = ConfigDict(extra="forbid")

    vizier_id: int
    round: int
    params: dict[str, Any]
    key: str | None
    status: ObservedStatus
    reason: str | None = None
    metrics: dict[str, float] = Field(default_factory=dict)  # what Vizier sees (objective(s))
    trial_round: int | None = None  # where its trial file is: rounds/<branch>/<trial_round>/trials/<trial_batch>/
    trial_batch: int | None = None
    layout: str | None = None  # the projected layout and backend: a replay that refused them is not asked again
    backend: str | None = None


class RoundTally(BaseModel):
    model_config = ConfigDict(extra="forbid")

    round: int
    attempts: int
    new_trials: int
    counts: dict[str, int]
    optimizer_seconds: float = 0.0
    best_score: float | None = None  # the branch's best feasible score after this round (Pareto: first objective)
    refills: int = 0  # passes of replacements for failed or timed-out replays
    moved: int = 0  # new trials moved off a proposal of a trial already taken (search/triage.py)


class BranchHistory(BaseModel):
    """Artifact `rounds/<branch>/<k>/observations.json`: every observation of the branch so far."""

    model_config = ConfigDict(extra="forbid")

    schema_version: int = SCHEMA_VERSION
    deployment_mode: str
    round: int
    stalled: bool = False
    stall_reason: str | None = None
    observations: list[Observation] = Field(default_factory=list)
    tallies: list[RoundTally] = Field(default_factory=list)


def observe(
    item: Suggested, round_index: int, goal: OptimizationGoal, result: TrialResult | None = None
) -> Observation:
    """The one way a suggestion's outcome becomes an observation.

    Without a result the suggestion was answered before any replay (unsupported, infeasible, a
    failed build) and is told as such. With one, the trial's status is told; a feasible result the
    branch already had (a cached or duplicate suggestion) is a cache hit.
    """
    base = {
        "vizier_id": item.vizier_id,
        "round": round_index,
        "params": item.params,
        "key": item.key,
        "trial_round": item.trial_round,
        "trial_batch": item.trial_batch,
        "layout": item.layout,
        "backend": (item.selection or {}).get("backend"),
    }
    if result is None:
        return Observation(**base, status=item.outcome, reason=item.reason)
    if result.status != "feasible":  # a percentile-SLA miss still tells the designer how far it missed
        return Observation(**base, status=result.status, reason=result.reason, metrics=designer_metrics(result, goal))
    status = "feasible" if item.outcome in NEW_TRIAL else "cache_hit"
    return Observation(**base, status=status, metrics=designer_metrics(result, goal))
