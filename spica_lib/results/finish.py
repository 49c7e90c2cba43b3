"""The finish: the search's top deployments replayed on fresh samples of the traffic.

Every candidate of a search is replayed on one traffic sample (`workload.arrival_seed`), so the
search's best is the maximum of noisy scores all drawn on that sample: it is biased upward (the
winner's curse), and one sample cannot order deployments a few per cent apart. So after the last
round, the top `sweep.finish_top` deployments are replayed on `sweep.finish_samples` fresh samples
each, the same samples for all of them (paired: their differences carry less noise than their
levels):

- `arrival` samples: an open-loop synthetic workload drawn again with seeds the search never used
  (Workload.fresh_sample). A KV-router deployment's fresh samples also re-roll its tie-breaks.
- `holdout` samples: a trace with a held-out part (`workload.holdout`) is replayed on that part,
  which the search never saw; a KV-router deployment once per sample (its tie-breaks are random),
  a round-robin one once, its score standing for every sample.
- `repeat` samples: traffic with no arrival draw and no held-out part (a closed loop, a trace) is
  the same on every sample; a KV-router deployment is replayed again, a round-robin one replays
  exactly and its search score stands for every sample without a replay.

The search's own replay is not among the samples: the finish's scores are an unbiased measure of
the deployment. Ranking them, with intervals and ties, is results/confidence.py.
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from spica_lib.config import SmartSearchConfig
from spica_lib.trial.spec import TrialResult, TrialSpec, TrialStatus

SCHEMA_VERSION = 2  # 2: fresh samples (1 held repeats of the search's own sample)
SAMPLE_SEPARATOR = "#"  # "<trial key>#<i>": the deployment's replay on fresh sample i
SampleKind = Literal["arrival", "holdout", "repeat"]


class SampleOutcome(BaseModel):
    """One top deployment on one fresh sample."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    index: int
    arrival_seeds: dict[str, int] = Field(default_factory=dict)  # workload ("" for a single one) -> seed
    status: TrialStatus
    score: float | None = None
    reason: str | None = None
    sla_miss: float | None = None  # worst ratio of the SLA's statistic to its bound (> 1: missed)
    average_gpus: float | None = None
    cost_per_million_output_tokens: float | None = None
    replayed: bool = True  # False: an exact replay of traffic that does not change; the search's score stands


class FinishedDeployment(BaseModel):
    """A top deployment's search score and its outcome on each fresh sample."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    key: str
    search_score: float
    used_gpus: int
    samples: list[SampleOutcome]
    # Its replays on the finish's traffic are exact (round robin on traffic that does not change): its samples
    # carry no noise, and a difference between two exact deployments is a fact, not an estimate.
    exact: bool = False

    @property
    def scores(self) -> list[float]:
        return [s.score for s in self.samples if s.status == "feasible" and s.score is not None]

    @property
    def held(self) -> bool:
        """Feasible on every fresh sample."""
        return len(self.scores) == len(self.samples)

    @property
    def failed_samples(self) -> list[str]:
        return [f"sample {s.index}: {s.status}: {s.reason}" for s in self.samples if s.status != "feasible"]

    @property
    def mean(self) -> float:
        return sum(self.scores) / len(self.scores) if self.scores else -math.inf

    @property
    def cost(self) -> float:
        """What it costs to run, for choosing among ties: US$ per million tokens when priced, else average GPUs."""
        for field in ("cost_per_million_output_tokens", "average_gpus"):
            values = [getattr(s, field) for s in self.samples if getattr(s, field) is not None]
            if values:
                return sum(values) / len(values)
        return float(self.used_gpus)


class FinishResult(BaseModel):
    """Artifact `finish.json`: the top deployments on the finish's fresh samples, in the search's order."""

    model_config = ConfigDict(extra="forbid")

    schema_version: int = SCHEMA_VERSION
    kind: SampleKind | None = None  # None: no finish (a Pareto goal, exact replays only, or switched off)
    samples: int = 0
    robustness: Literal["mean", "p10", "worst"] = "mean"
    deployments: list[FinishedDeployment] = Field(default_factory=list)

    def by_key(self) -> dict[str, FinishedDeployment]:
        return {d.key: d for d in self.deployments}


def sample_kind(config: SmartSearchConfig) -> SampleKind | None:
    """What a fresh sample is for this config, or None when it has no finish."""
    if not config.sweep.finish_samples:
        return None
    workloads = config.workloads or [config.workload]
    if any(w.draws_arrivals for w in workloads):
        return "arrival"
    return "holdout" if any(w.holdout is not None for w in workloads) else "repeat"


def replays_exactly(spec: TrialSpec) -> bool:
    """Whether replaying this trial on the same traffic gives the same result (only the KV router draws)."""
    return spec.replay.plan.router_mode != "kv_router"


def needs_replay(spec: TrialSpec, kind: SampleKind | None, index: int) -> bool:
    """Whether fresh sample `index` of this deployment must be replayed (else an exact replay's score stands)."""
    if kind == "arrival":
        return True
    if kind == "holdout" and index == 0:
        return True
    return kind is not None and not replays_exactly(spec)


def sample_specs(top: dict[str, TrialSpec], kind: SampleKind | None, samples: int) -> dict[str, TrialSpec]:
    """The finish's replays ("<key>#<i>" -> spec): each top deployment on each fresh sample that needs one."""
    return {
        f"{key}{SAMPLE_SEPARATOR}{index}": spec.on_fresh_sample(index) if kind != "repeat" else spec
        for key, spec in top.items()
        for index in range(samples)
        if needs_replay(spec, kind, index)
    }


def outcome(index: int, spec: TrialSpec, result: TrialResult) -> SampleOutcome:
    """A fresh sample's replay, as the finish keeps it."""
    return SampleOutcome(
        index=index,
        arrival_seeds=spec.arrival_seeds(),
        status=result.status,
        score=result.score if result.status == "feasible" else None,
        reason=result.reason,
        sla_miss=result.sla_miss,
        average_gpus=result.average_gpus,
        cost_per_million_output_tokens=result.metrics.get("cost_per_million_output_tokens"),
    )


def exact_outcome(index: int, spec: TrialSpec, result: TrialResult) -> SampleOutcome:
    """A sample that needs no replay: an exact replay's result on the same traffic stands (round robin)."""
    return outcome(index, spec, result).model_copy(update={"replayed": False})


def standing_outcome(
    index: int, kind: SampleKind | None, spec: TrialSpec, replayed: dict[int, SampleOutcome], search: TrialResult
) -> SampleOutcome:
    """Sample `index` of a deployment: its replay when it had one, else what stands for it (an exact replay's
    first held-out sample, or its search result on traffic that does not change)."""
    if index in replayed:
        return replayed[index]
    if kind == "holdout" and 0 in replayed:
        return replayed[0].model_copy(update={"index": index, "replayed": False})
    return exact_outcome(index, spec, search)


def finished(
    config: SmartSearchConfig,
    top: dict[str, tuple[TrialSpec, TrialResult]],
    replays: dict[str, tuple[TrialSpec, TrialResult]],
) -> FinishResult:
    """The finish's artifact from the top deployments (key -> spec and search result, in ranking order) and
    the results of their `sample_specs` replays ("<key>#<i>" -> spec and result)."""
    kind, samples = sample_kind(config), config.sweep.finish_samples or 0
    by_key: dict[str, dict[int, SampleOutcome]] = {key: {} for key in top}
    for name, (spec, result) in replays.items():
        key, _, index = name.partition(SAMPLE_SEPARATOR)
        by_key[key][int(index)] = outcome(int(index), spec, result)
    deployments = [
        FinishedDeployment(
            key=key,
            search_score=result.score,
            used_gpus=result.used_gpus,
            samples=[standing_outcome(i, kind, spec, by_key[key], result) for i in range(samples)],
            exact=kind != "arrival" and replays_exactly(spec),
        )
        for key, (spec, result) in top.items()
    ]
    return FinishResult(kind=kind, samples=samples, robustness=config.goal.robustness or "mean", deployments=deployments)
