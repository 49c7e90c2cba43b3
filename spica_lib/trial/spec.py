"""The trial file's models: the spec (everything needed to reproduce one replay), the result and the record.

`TrialSpec.key()` is the canonical-JSON hash of what is replayed and how it is scored (the plan,
traffic, goal and layout), not of the selection that led there: it names the trial file, so two
selections that differ only in knobs with no effect on the replay are one trial, replayed once.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from spica_lib.base.artifacts import sha256_of
from spica_lib.config import OptimizationGoal
from spica_lib.traces.scan import scan_trace
from spica_lib.config.workload import SPLIT_MARK
from spica_lib.facts.parallel import DisaggConfig, ReplicaConfig
from spica_lib.replay.request import EarlyStop, PaceCheckpoint, ReplayRequest, ScalingEvent

SCHEMA_VERSION = 2  # 2: the key hashes the replayed deployment, not the selection
# "pruned": stopped early because its score could no longer reach the sweep's k-th best (replay/early_stop.py):
# not infeasible, not ranked.
TrialStatus = Literal["feasible", "infeasible", "failed", "timed_out", "unsupported", "pruned"]


class WorkloadReplay(BaseModel):
    """One of several workloads a trial is replayed on: its name, weight and replay request."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    weight: float = 1.0
    replay: ReplayRequest
    trace_sha256: str | None = None


class TrialSpec(BaseModel):
    """Everything needed to reproduce one replay. Its hash (`key`) is the trial's identity."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_version: int = SCHEMA_VERSION
    deployment_mode: Literal["agg", "disagg"]
    selection: dict[str, Any]
    parallel_config: ReplicaConfig | DisaggConfig
    sample: dict[str, Any]
    replay: ReplayRequest
    goal: OptimizationGoal
    gpu_budget: int
    trace_sha256: str | None = None
    notes: list[str] = Field(default_factory=list)
    # Several workloads: every one (the first is `replay`), each replayed separately in the same job.
    workloads: list[WorkloadReplay] | None = None

    @property
    def used_gpus(self) -> int:
        return self.parallel_config.total_gpus

    def key(self) -> str:
        """SHA-256 of the canonical JSON of the replayed deployment, with the trace named by its content.

        The selection, the flat sample and the notes describe how the search got here; they are
        left out so that knobs the replay never sees (router weights under round robin, planner
        sampling without a scaling policy, a load ratio that rounds to the same concurrency) cannot
        make a second trial of one deployment.
        """
        data = self.model_dump(mode="json", exclude={"selection", "sample", "notes"})
        if self.trace_sha256 is not None:
            data["replay"]["workload"]["trace_path"] = f"sha256:{self.trace_sha256}"
        for item in data.get("workloads") or []:
            if item["trace_sha256"] is not None:
                item["replay"]["workload"]["trace_path"] = f"sha256:{item['trace_sha256']}"
        for workload in [data["replay"]["workload"], *(item["replay"]["workload"] for item in data.get("workloads") or [])]:
            if workload.get("sampled_from"):  # the trace a sample was drawn from, named by its content too
                workload["sampled_from"] = f"sha256:{scan_trace(workload['sampled_from']).sha256}"
            if isinstance(workload.get("holdout"), str):  # a file, named by its content wherever it lies
                workload["holdout"] = f"sha256:{scan_trace(workload['holdout'].removeprefix(SPLIT_MARK)).sha256}"
            elif workload.get("holdout") is None:
                workload.pop("holdout", None)  # a trial without one keeps the key it had before holdouts
        if data.get("workloads") is None:
            data.pop("workloads", None)  # a one-workload trial keeps the key it had before workload lists
        if data["goal"].get("sla_coverage") is None:
            data["goal"].pop("sla_coverage", None)  # no coverage floor: the key of before the floor existed
        for name in ("equivalence_margin", "rare_event_share"):
            data["goal"].pop(name, None)  # how the finish compares replays, not what one replays
        return sha256_of(data)

    def on_fresh_sample(self, index: int) -> TrialSpec:
        """This trial on fresh traffic: the `index`-th fresh arrival sample of each workload that draws
        arrivals, the held-out part of each trace that has one, the same traffic otherwise."""
        replay, sha = _on_fresh_sample(self.replay, index, self.trace_sha256)
        parts = []
        for part in self.workloads or []:
            fresh, part_sha = _on_fresh_sample(part.replay, index, part.trace_sha256)
            parts.append(part.model_copy(update={"replay": fresh, "trace_sha256": part_sha}))
        return self.model_copy(update={"replay": replay, "trace_sha256": sha, "workloads": parts or None})

    def arrival_seeds(self) -> dict[str, int]:
        """The arrival seed of each workload that draws arrivals (name -> seed; "" names a single workload)."""
        if self.workloads:
            seeds = {part.name: part.replay.workload.arrival_seed for part in self.workloads}
        else:
            seeds = {"": self.replay.workload.arrival_seed}
        return {name: seed for name, seed in seeds.items() if seed is not None}

    def on_workload(self, part: WorkloadReplay) -> TrialSpec:
        """This trial as replayed on one of its workloads."""
        return self.model_copy(update={"replay": part.replay, "trace_sha256": part.trace_sha256, "workloads": None})


class WorkloadResult(BaseModel):
    """How a trial did on one of its workloads."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    status: TrialStatus
    reason: str | None = None
    score: float | None = None
    sla_miss: float | None = None
    metrics: dict[str, float] = Field(default_factory=dict)


class TrialResult(BaseModel):
    """How a trial ended, with its metrics and score when it was feasible."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)  # no JSON form: see trial.evaluate

    status: TrialStatus
    reason: str | None = None
    metrics: dict[str, float] = Field(default_factory=dict)
    objectives: dict[str, float] | None = None
    score: float | None = None
    used_gpus: int
    average_gpus: float | None = None
    sla_miss: float | None = None  # worst ratio of the SLA's statistic to its bound (> 1: missed); None without SLA
    checkpoint: PaceCheckpoint | None = None  # where the prefix of the work ended, when the replay reached it
    stop: EarlyStop | None = None  # stopped early on a sound bound: which rule, where, with what (metrics then empty)
    scaling_events: list[ScalingEvent] = Field(default_factory=list)
    wall_seconds: float = 0.0
    cpu_seconds: float = 0.0
    replay_seconds: float = 0.0
    versions: dict[str, str] = Field(default_factory=dict)
    # Several workloads: each one's outcome, and the one that set the score (the worst-scoring).
    workloads: dict[str, WorkloadResult] | None = None
    binding_workload: str | None = None


class TrialRecord(BaseModel):
    """Artifact `rounds/<branch>/<k>/trials/<key>.json`: a trial's spec and its result."""

    model_config = ConfigDict(extra="forbid")

    key: str
    spec: TrialSpec
    result: TrialResult


def _on_fresh_sample(request: ReplayRequest, index: int, sha: str | None) -> tuple[ReplayRequest, str | None]:
    workload = request.workload
    fresh = workload.holdout_part() or workload.fresh_sample(index)
    if not fresh.is_trace_based:
        return request.model_copy(update={"workload": fresh}), sha
    # A held-out part or a resample is another trace: the screen was cut to the search's, and the finish
    # replays its few top deployments in full.
    return request.model_copy(update={"workload": fresh, "screen": None}), scan_trace(fresh.trace_path).sha256
