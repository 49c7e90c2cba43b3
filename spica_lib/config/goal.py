"""`goal`: what "best" means — one scalar target, or a Pareto front over several — and the SLA."""

from __future__ import annotations

from enum import StrEnum

from pydantic import Field, StrictFloat, StrictInt, model_validator

from spica_lib.config.strict import StrictModel

Number = StrictInt | StrictFloat


class OptimizationTarget(StrEnum):
    THROUGHPUT = "throughput"
    THROUGHPUT_PER_GPU = "throughput_per_gpu"
    THROUGHPUT_PER_USER = "throughput_per_user"
    E2E_LATENCY = "e2e_latency"
    GOODPUT = "goodput"
    GOODPUT_PER_GPU = "goodput_per_gpu"
    PARETO = "pareto"

    @property
    def maximize(self) -> bool:
        if self is OptimizationTarget.PARETO:
            raise ValueError("'pareto' is multi-objective and has no single direction to optimise")
        return self is not OptimizationTarget.E2E_LATENCY

    @property
    def planner_optimization_target(self) -> str:
        """The Dynamo planner's `optimization_target` that serves this goal."""
        return _PLANNER_TARGET[self]

    @property
    def needs_sla(self) -> bool:
        return self in (OptimizationTarget.GOODPUT, OptimizationTarget.GOODPUT_PER_GPU)


_PLANNER_TARGET = {
    OptimizationTarget.THROUGHPUT: "throughput",
    OptimizationTarget.THROUGHPUT_PER_GPU: "throughput",
    OptimizationTarget.THROUGHPUT_PER_USER: "throughput",
    OptimizationTarget.E2E_LATENCY: "latency",
    OptimizationTarget.GOODPUT: "sla",
    OptimizationTarget.GOODPUT_PER_GPU: "sla",
    OptimizationTarget.PARETO: "throughput",
}

DEFAULT_PARETO_OBJECTIVES = [OptimizationTarget.THROUGHPUT_PER_GPU, OptimizationTarget.THROUGHPUT_PER_USER]


class SLATarget(StrictModel):
    """Per-request service-level bounds, in milliseconds. A request meeting them counts as goodput."""

    ttft_ms: Number | None = Field(default=None, gt=0)
    itl_ms: Number | None = Field(default=None, gt=0)
    e2e_ms: Number | None = Field(default=None, gt=0)

    @model_validator(mode="after")
    def _one_kind_of_bound(self) -> SLATarget:
        # The replay counts goodput against either per-token bounds or an end-to-end bound, never both.
        if self.e2e_ms is not None and (self.ttft_ms is not None or self.itl_ms is not None):
            raise ValueError(
                "give either ttft_ms and itl_ms, or e2e_ms alone: the Dynamo replay counts goodput against "
                f"one kind of bound (got ttft_ms={self.ttft_ms}, itl_ms={self.itl_ms}, e2e_ms={self.e2e_ms})"
            )
        return self

    @property
    def seeds_planner(self) -> bool:
        """The planner's SLA scaling needs both a TTFT and an ITL bound."""
        return self.ttft_ms is not None and self.itl_ms is not None

    @property
    def defines_goodput(self) -> bool:
        return self.seeds_planner or self.e2e_ms is not None


class OptimizationGoal(StrictModel):
    """The objective: a scalar `target`, or `pareto` over `pareto_objectives`."""

    target: OptimizationTarget = OptimizationTarget.THROUGHPUT
    sla: SLATarget | None = None
    pareto_objectives: list[OptimizationTarget] | None = None

    @property
    def is_pareto(self) -> bool:
        return self.target is OptimizationTarget.PARETO

    @property
    def resolved_pareto_objectives(self) -> list[OptimizationTarget]:
        # Only an absent list takes the default; an explicit [] is an error caught by the validator.
        return list(DEFAULT_PARETO_OBJECTIVES) if self.pareto_objectives is None else list(self.pareto_objectives)

    @property
    def objectives(self) -> list[OptimizationTarget]:
        """The scalar targets that are scored: the Pareto objectives, or the single target."""
        return self.resolved_pareto_objectives if self.is_pareto else [self.target]

    @model_validator(mode="after")
    def _consistent(self) -> OptimizationGoal:
        if not self.is_pareto and self.pareto_objectives is not None:
            raise ValueError(
                f"pareto_objectives only applies when target is 'pareto' (target is {self.target.value!r})"
            )
        if self.is_pareto:
            self._check_pareto_objectives()
        needing_sla = sorted(t.value for t in self.objectives if t.needs_sla)
        if needing_sla and (self.sla is None or not self.sla.defines_goodput):
            raise ValueError(
                f"{needing_sla} count only requests that meet an SLA: set goal.sla with ttft_ms and itl_ms, or e2e_ms"
            )
        return self

    def _check_pareto_objectives(self) -> None:
        objectives = self.resolved_pareto_objectives
        values = [t.value for t in objectives]
        if len(objectives) < 2:
            raise ValueError(f"a pareto goal needs at least 2 objectives in pareto_objectives, got {values}")
        if OptimizationTarget.PARETO in objectives:
            raise ValueError("pareto_objectives lists scalar targets; it cannot contain 'pareto' itself")
        if len(set(objectives)) != len(objectives):
            raise ValueError(f"pareto_objectives must be distinct, got {values}")
