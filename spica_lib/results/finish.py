"""The noise-aware finish: replay the top deployments again where the replay is not exact, rank them by their mean.

Dynamo's KV router breaks ties at random, with no seed: the same deployment replays 1-2 % apart
from run to run. A ranking decided by one replay can put first a deployment that only drew a lucky
run. So the top `sweep.top_k` deployments with a KV router are replayed until each has
`sweep.finish_repeats` replays; they are ranked among themselves by their mean score, each shows
its range, and deployments whose ranges overlap are marked: within the replay's noise, neither wins.
Round-robin deployments replay identically, so they are not replayed again (their range is a point).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from spica_lib.trial.spec import TrialSpec

REPEAT_SEPARATOR = "#"  # "<trial key>#<n>": the n-th extra replay of a trial


class FinishedDeployment(BaseModel):
    """One top deployment's scores: the search's replay first, then the finish's repeats that scored."""

    model_config = ConfigDict(extra="forbid")

    key: str
    scores: list[float]
    failed_repeats: list[str] = Field(default_factory=list)  # why a repeat did not score (e.g. over a p99 SLA)

    @property
    def mean(self) -> float:
        return sum(self.scores) / len(self.scores)

    @property
    def low(self) -> float:
        return min(self.scores)

    @property
    def high(self) -> float:
        return max(self.scores)

    @property
    def replays(self) -> int:
        return len(self.scores) + len(self.failed_repeats)


class FinishResult(BaseModel):
    """Artifact `finish.json`: the top deployments' repeated replays, in the search's ranking order."""

    model_config = ConfigDict(extra="forbid")

    repeats: int
    deployments: list[FinishedDeployment] = Field(default_factory=list)

    def by_key(self) -> dict[str, FinishedDeployment]:
        return {d.key: d for d in self.deployments}


def replays_exactly(spec: TrialSpec) -> bool:
    """Whether replaying this trial again gives the same result (only the KV router draws at random)."""
    return spec.replay.plan.router_mode != "kv_router"


def repeat_specs(top: dict[str, TrialSpec], repeats: int) -> dict[str, TrialSpec]:
    """The extra replays the finish needs: `repeats - 1` per top deployment that does not replay exactly."""
    return {
        f"{key}{REPEAT_SEPARATOR}{n}": spec
        for key, spec in top.items()
        if not replays_exactly(spec)
        for n in range(1, repeats)
    }


def overlapping(deployments: list[FinishedDeployment]) -> dict[str, list[str]]:
    """Per deployment, the others whose score range overlaps its own (none of them clearly wins)."""
    return {
        d.key: [o.key for o in deployments if o.key != d.key and o.low <= d.high and d.low <= o.high]
        for d in deployments
    }
