"""Artifacts of the baselines stage: aiconfigurator's own pick (`baselines/aiconfigurator_pick.json`) and
the baselines replayed next to the search (`baselines.json`)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from spica_lib.facts.parallel import DisaggConfig, ReplicaConfig
from spica_lib.trial.spec import TrialResult, TrialSpec

BaselineName = Literal["aiconfigurator", "no_planner", "default_router"]
LABELS: dict[str, str] = {
    "aiconfigurator": "aiconfigurator's pick",
    "no_planner": "the best without the planner",
    "default_router": "the best with the default router (round robin)",
}


class AiconfiguratorPick(BaseModel):
    """What aiconfigurator's own search (`aiconfigurator cli default`) picks for the sweep's model, hardware,
    GPU budget and SLA, on the workload's mean ISL/OSL; or why there is no pick."""

    model_config = ConfigDict(extra="forbid")

    deployment_mode: Literal["agg", "disagg"] | None = None
    backend: str | None = None
    parallel_config: ReplicaConfig | DisaggConfig | None = None
    max_num_seqs: dict[str, int] = Field(default_factory=dict)  # role ("agg" | "prefill" | "decode") -> batch size
    isl: int | None = None
    osl: int | None = None
    ttft_ms: float | None = None  # the bounds aiconfigurator searched under
    tpot_ms: float | None = None
    estimate: dict[str, float] = Field(default_factory=dict)  # aiconfigurator's own numbers for its pick
    considered: dict[str, float] = Field(default_factory=dict)  # "<mode>/<backend>" -> its best tokens/s/GPU
    offered_rate: float | None = None  # the workload's requests/s the pick was sized to (None: a closed loop)
    sizing: str | None = None  # how its replicas were chosen
    aiconfigurator_version: str | None = None
    seconds: float = 0.0
    problem: str | None = None  # why there is no pick (aiconfigurator found nothing, or failed)


class Baseline(BaseModel):
    """One baseline: which deployment it is, where its score comes from, and its result."""

    model_config = ConfigDict(extra="forbid")

    name: BaselineName
    label: str
    source: Literal["search", "replayed", "none"]  # a trial the search already replayed, a new replay, or nothing
    key: str | None = None  # trial key
    deployment: str | None = None  # in words: "agg 2 x tp4 on vllm, kv_router, planner load_180_5"
    spec: TrialSpec | None = None  # what was replayed: the same workload, SLA and screen as the search's trials
    result: TrialResult | None = None
    note: str | None = None  # why there is no baseline, or what to know about it
    # The search's best trial without the feature, weighed against this replay once it is in (plan.settle).
    searched_alternative: str | None = None


class BaselinesResult(BaseModel):
    """Artifact `baselines.json`: the baselines, each scored by the same replay, workload and SLA as the search."""

    model_config = ConfigDict(extra="forbid")

    winner_key: str | None = None
    baselines: list[Baseline] = Field(default_factory=list)
