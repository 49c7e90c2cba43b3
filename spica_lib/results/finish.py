"""The finish: the search's top deployments replayed on fresh samples of the traffic.

Every candidate of a search is replayed on one traffic sample (`workload.arrival_seed`, or the
trace itself), so the search's best is the maximum of noisy scores all drawn on that sample: it is
biased upward (the winner's curse), and one sample cannot order deployments a few per cent apart.
So after the last round, the top `sweep.finish_top` distinct deployments are replayed on fresh
samples, the same samples for all of them (paired: their differences carry less noise than their
levels). What a fresh sample is depends on the traffic:

- `arrival`: an open-loop synthetic workload drawn again with seeds the search never used
  (Workload.fresh_sample). A KV-router deployment's fresh samples also re-roll its tie-breaks.
- `bootstrap`: a trace without a held-out part is resampled by blocks of time
  (traces/resample.py): another day like the recorded one. Every deployment is replayed on
  each resample, round robin included.
- `holdout`: a trace with a held-out part (`workload.holdout`) is replayed on that part, which the
  search never saw; a KV-router deployment once per sample (its tie-breaks are random), a
  round-robin one once, its score standing for every sample.
- `repeat`: a closed-loop synthetic workload has no arrival draw; a KV-router deployment is
  replayed again, a round-robin one replays exactly and its search score stands for every sample.

How many samples each deployment gets is decided as they come in (results/sequential.py), and
what they show is results/confidence.py. The search's own replay is never among the samples.
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from spica_lib.config import SmartSearchConfig
from spica_lib.config.finish_settings import rare_event_share
from spica_lib.config.goal import EquivalenceMargin
from spica_lib.results.rare_events import samples_to_see
from spica_lib.trial.spec import TrialResult, TrialSpec, TrialStatus

# 3: a sequential finish (samples per deployment), an equivalence margin, sample metrics; 4: a rare-event share
SCHEMA_VERSION = 4
SAMPLE_SEPARATOR = "#"  # "<trial key>#<i>": the deployment's replay on fresh sample i
SampleKind = Literal["arrival", "bootstrap", "holdout", "repeat"]
# What the report shows of a finished row, as means over its fresh samples (the rest are the search's).
SAMPLE_METRICS = (
    "mean_ttft_ms",
    "mean_itl_ms",
    "p99_ttft_ms",
    "sla_coverage",
    "output_throughput_tok_s",
    "goodput_output_throughput_tok_s",
    "cost_per_million_output_tokens",
)


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
    metrics: dict[str, float] = Field(default_factory=dict)  # SAMPLE_METRICS the replay reported
    replayed: bool = True  # False: an exact replay of traffic that does not change; another result stands


class FinishedDeployment(BaseModel):
    """A top deployment's search score and its outcome on each fresh sample it was given."""

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
    def held_share(self) -> float:
        """The share of its fresh samples it was feasible on (met the SLA, where the goal has one)."""
        return len(self.scores) / len(self.samples) if self.samples else 0.0

    @property
    def failed_samples(self) -> list[str]:
        return [f"sample {s.index}: {s.status}: {s.reason}" for s in self.samples if s.status != "feasible"]

    @property
    def mean(self) -> float:
        return sum(self.scores) / len(self.scores) if self.scores else -math.inf

    def metric_mean(self, name: str) -> float | None:
        """A metric's mean over the samples that report it (None: none does)."""
        values = [s.metrics[name] for s in self.samples if name in s.metrics]
        return sum(values) / len(values) if values else None

    @property
    def sla_miss_mean(self) -> float | None:
        values = [s.sla_miss for s in self.samples if s.sla_miss is not None]
        return sum(values) / len(values) if values else None

    @property
    def cost(self) -> float:
        """What it costs to run, for choosing among equivalents: US$ per million tokens when priced, else average GPUs."""
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
    looks: list[int] = Field(default_factory=list)  # the samples per deployment at each planned look
    robustness: Literal["mean", "p10", "worst"] = "mean"
    margin: EquivalenceMargin | None = None  # goal.equivalence_margin: None only with no finish
    # goal.rare_event_share: an equivalence needs enough compared samples that a failure on this share of traffic
    # windows would have shown (results/rare_events.py). None: no such check (exact replays, or a file of before it).
    rare_event_share: float | None = None
    deployments: list[FinishedDeployment] = Field(default_factory=list)
    stopped: str | None = None  # why no more samples were drawn

    def by_key(self) -> dict[str, FinishedDeployment]:
        return {d.key: d for d in self.deployments}

    @property
    def first_samples(self) -> int:
        return self.looks[0] if self.looks else 0

    @property
    def rare_samples(self) -> int | None:
        """The compared samples an equivalence needs for goal.rare_event_share (None: no such check)."""
        return samples_to_see(self.rare_event_share) if self.rare_event_share is not None else None

    @property
    def rare_look(self) -> int | None:
        """The look past sweep.finish_max_samples that only an equivalence's rare-event check may take (None: none)."""
        needed = self.rare_samples
        return needed if needed is not None and self.looks and needed > self.looks[-1] else None

    @property
    def look_count(self) -> int:
        """The looks every claim is corrected for (Bonferroni): the planned ones, and the rare-event check's."""
        return max(1, len(self.looks) + (self.rare_look is not None))

    @property
    def samples_used(self) -> tuple[int, int]:
        """The fewest and the most samples a finished deployment got."""
        counts = [len(d.samples) for d in self.deployments] or [0]
        return min(counts), max(counts)


def sample_kind(config: SmartSearchConfig) -> SampleKind | None:
    """What a fresh sample is for this config, or None when it has no finish."""
    if not config.sweep.finish_samples:
        return None
    workloads = config.workloads or [config.workload]
    if any(w.draws_arrivals for w in workloads):
        return "arrival"
    if any(w.resamples for w in workloads):
        return "bootstrap"
    return "holdout" if any(w.holdout is not None for w in workloads) else "repeat"


def replays_exactly(spec: TrialSpec) -> bool:
    """Whether replaying this trial on the same traffic gives the same result (only the KV router draws)."""
    return spec.replay.plan.router_mode != "kv_router"


def is_exact(kind: SampleKind | None, spec: TrialSpec) -> bool:
    """Whether every fresh sample of this deployment is the same exact replay (nothing to estimate)."""
    return kind in ("holdout", "repeat") and replays_exactly(spec)


def needs_replay(spec: TrialSpec, kind: SampleKind | None, index: int) -> bool:
    """Whether fresh sample `index` of this deployment must be replayed (else an exact replay's score stands)."""
    if kind in ("arrival", "bootstrap"):
        return True
    if kind == "holdout" and index == 0:
        return True
    return kind is not None and not replays_exactly(spec)


def sample_name(key: str, index: int) -> str:
    return f"{key}{SAMPLE_SEPARATOR}{index}"


def sample_specs(top: dict[str, TrialSpec], kind: SampleKind | None, indices: dict[str, range]) -> dict[str, TrialSpec]:
    """The finish's replays ("<key>#<i>" -> spec): each top deployment on each of its fresh samples `indices[key]`
    that needs one."""
    return {
        sample_name(key, index): spec.on_fresh_sample(index) if kind != "repeat" else spec
        for key, spec in top.items()
        for index in indices.get(key, range(0))
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
        metrics={name: result.metrics[name] for name in SAMPLE_METRICS if name in result.metrics},
    )


def standing_outcome(
    index: int, kind: SampleKind | None, spec: TrialSpec, replayed: dict[int, SampleOutcome], search: TrialResult
) -> SampleOutcome:
    """Sample `index` of a deployment: its replay when it had one, else what stands for it (an exact replay's
    first held-out sample, or its search result on traffic that does not change)."""
    if index in replayed:
        return replayed[index]
    if kind == "holdout" and 0 in replayed:
        return replayed[0].model_copy(update={"index": index, "replayed": False})
    return outcome(index, spec, search).model_copy(update={"replayed": False})


def finished(
    config: SmartSearchConfig,
    top: dict[str, tuple[TrialSpec, TrialResult]],
    replays: dict[str, tuple[TrialSpec, TrialResult]],
    counts: dict[str, int],
    looks: list[int],
    stopped: str | None = None,
) -> FinishResult:
    """The finish's artifact from the top deployments (key -> spec and search result, in ranking order), the
    results of their `sample_specs` replays ("<key>#<i>" -> spec and result) and how many samples each got."""
    kind = sample_kind(config)
    by_key: dict[str, dict[int, SampleOutcome]] = {key: {} for key in top}
    for name, (spec, result) in replays.items():
        key, _, index = name.partition(SAMPLE_SEPARATOR)
        by_key[key][int(index)] = outcome(int(index), spec, result)
    deployments = [
        FinishedDeployment(
            key=key,
            search_score=result.score,
            used_gpus=result.used_gpus,
            samples=[standing_outcome(i, kind, spec, by_key[key], result) for i in range(counts.get(key, 0))],
            exact=is_exact(kind, spec),
        )
        for key, (spec, result) in top.items()
    ]
    return FinishResult(
        kind=kind,
        looks=looks,
        robustness=config.goal.robustness or "mean",
        margin=config.goal.equivalence_margin,
        rare_event_share=rare_event_share(config),
        deployments=deployments,
        stopped=stopped,
    )
