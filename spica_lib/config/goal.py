"""`goal`: what "best" means — one scalar target, or a Pareto front over several — and the SLA."""

from __future__ import annotations

import math
from enum import StrEnum
from typing import Any, Literal

from pydantic import Field, StrictFloat, StrictInt, field_validator, model_serializer, model_validator

from spica_lib.base.since import without_defaults
from spica_lib.config.strict import StrictModel

Number = StrictInt | StrictFloat


class OptimizationTarget(StrEnum):
    THROUGHPUT = "throughput"
    THROUGHPUT_PER_GPU = "throughput_per_gpu"
    THROUGHPUT_PER_USER = "throughput_per_user"
    E2E_LATENCY = "e2e_latency"
    GOODPUT = "goodput"
    GOODPUT_PER_GPU = "goodput_per_gpu"
    COST_PER_MILLION_OUTPUT_TOKENS = "cost_per_million_output_tokens"
    PARETO = "pareto"

    @property
    def maximize(self) -> bool:
        if self is OptimizationTarget.PARETO:
            raise ValueError("'pareto' is multi-objective and has no single direction to optimise")
        return self not in (OptimizationTarget.E2E_LATENCY, OptimizationTarget.COST_PER_MILLION_OUTPUT_TOKENS)

    @property
    def planner_optimization_target(self) -> str:
        """The Dynamo planner's `optimization_target` that serves this goal."""
        return _PLANNER_TARGET[self]

    @property
    def needs_sla(self) -> bool:
        return self in (OptimizationTarget.GOODPUT, OptimizationTarget.GOODPUT_PER_GPU)

    @property
    def needs_price(self) -> bool:
        return self is OptimizationTarget.COST_PER_MILLION_OUTPUT_TOKENS


_PLANNER_TARGET = {
    OptimizationTarget.THROUGHPUT: "throughput",
    OptimizationTarget.THROUGHPUT_PER_GPU: "throughput",
    OptimizationTarget.THROUGHPUT_PER_USER: "throughput",
    OptimizationTarget.E2E_LATENCY: "latency",
    OptimizationTarget.GOODPUT: "sla",
    OptimizationTarget.GOODPUT_PER_GPU: "sla",
    OptimizationTarget.COST_PER_MILLION_OUTPUT_TOKENS: "throughput",  # fewer GPU-hours per token served
    OptimizationTarget.PARETO: "throughput",
}

DEFAULT_PARETO_OBJECTIVES = [OptimizationTarget.THROUGHPUT_PER_GPU, OptimizationTarget.THROUGHPUT_PER_USER]


# A percentile is only as good as the requests in its tail: at least this many lie beyond it in a replay,
# or the statistic is that of one or two requests (a p99 over 160 requests is its second-worst request).
TAIL_REQUESTS = 10


def requests_for_percentile(percentile: int) -> int:
    """Requests a replay needs for TAIL_REQUESTS of them to lie beyond `percentile` (p99: 1000, p95: 200)."""
    return math.ceil(TAIL_REQUESTS / (1 - percentile / 100) - 1e-9)


SLA_STATISTIC_METRICS = {"ttft_ms": "ttft_ms", "itl_ms": "itl_ms", "e2e_ms": "e2e_latency_ms"}  # bound -> replay metric


class SLATarget(StrictModel):
    """Service-level bounds, in milliseconds. A request meeting them counts as goodput (Dynamo's meaning).

    Without `percentile` the bounds only shape goodput, so they need a goodput target (refused
    otherwise: they would do nothing). With it, they are a hard constraint on that percentile over
    requests, for any target: a candidate whose p-th percentile TTFT, ITL or E2E is over its bound
    is infeasible, whatever its score. A replay is stopped early only where it is certain to miss it
    (replay/early_stop.py).
    """

    ttft_ms: Number | None = Field(default=None, gt=0)
    itl_ms: Number | None = Field(default=None, gt=0)
    e2e_ms: Number | None = Field(default=None, gt=0)
    percentile: Literal[50, 75, 90, 95, 99] | None = None

    def bounds(self) -> list[tuple[str, float]]:
        """(replay metric of the chosen statistic, bound) for each bound given, e.g. ("p99_ttft_ms", 2000)."""
        prefix = {None: "mean", 50: "median"}.get(self.percentile, f"p{self.percentile}")
        return [
            (f"{prefix}_{metric}", float(getattr(self, bound)))
            for bound, metric in SLA_STATISTIC_METRICS.items()
            if getattr(self, bound) is not None
        ]

    @property
    def statistic(self) -> str:
        return "mean" if self.percentile is None else f"p{self.percentile}"

    @property
    def is_constraint(self) -> bool:
        return self.percentile is not None

    @model_validator(mode="after")
    def _one_kind_of_bound(self) -> SLATarget:
        # The replay counts goodput against either per-token bounds or an end-to-end bound, never both.
        if self.e2e_ms is not None and (self.ttft_ms is not None or self.itl_ms is not None):
            raise ValueError(
                "give either ttft_ms and itl_ms, or e2e_ms alone: the Dynamo replay counts goodput against "
                f"one kind of bound (got ttft_ms={self.ttft_ms}, itl_ms={self.itl_ms}, e2e_ms={self.e2e_ms})"
            )
        if self.percentile is not None and not self.bounds():
            raise ValueError(f"percentile {self.percentile} needs at least one bound (ttft_ms, itl_ms or e2e_ms)")
        return self

    @property
    def seeds_planner(self) -> bool:
        """The planner's SLA scaling needs both a TTFT and an ITL bound."""
        return self.ttft_ms is not None and self.itl_ms is not None

    @property
    def defines_goodput(self) -> bool:
        return self.seeds_planner or self.e2e_ms is not None


# The finish's equivalence margin when none is given: a deployment within 5 % of the best is as good as the best.
# Why 5 %: the replay's own error against measured silicon is larger than that (docs/fidelity/index.md), so a gap
# under it cannot be acted on, and at the spread of paired fresh samples measured in bench/robust_answers.py
# a 5 % margin is shown within a few looks, where 1-2 % would take far more replays than the search itself.
DEFAULT_EQUIVALENCE_SHARE = 0.05
# The smallest share of traffic windows on which a failure must not go unseen before a deployment is called
# equivalent to the best (results/rare_events.py): a KV-cache cliff or a queue that tips over on one arrival pattern
# in 1 window of 10 costs a deployment 6 % when it loses 60 % there. At 10 % an equivalence needs 42 compared
# samples; what that costs the default sweep and the trace example is measured in docs/benchmarks/finish.md.
DEFAULT_RARE_EVENT_SHARE = 0.10


class EquivalenceMargin(StrictModel):
    """How far behind the best a deployment may be and still count as equivalent to it: a share of the best
    deployment's statistic (`relative`) or a value in the goal's own unit (`absolute`). Written as a bare
    number, it is a share."""

    relative: Number | None = Field(default=None, gt=0, lt=1)
    absolute: Number | None = Field(default=None, gt=0)

    @model_validator(mode="after")
    def _one_kind(self) -> EquivalenceMargin:
        if (self.relative is None) == (self.absolute is None):
            raise ValueError(
                "give exactly one of relative (a share of the best deployment's statistic, e.g. 0.05) or "
                f"absolute (in the goal's unit); got relative={self.relative}, absolute={self.absolute}"
            )
        return self

    def of(self, best: float) -> float:
        """The margin in the goal's unit, next to a best statistic of `best` (signed scores: its size counts)."""
        return float(self.absolute) if self.absolute is not None else float(self.relative) * abs(best)

    def text(self, unit: str = "") -> str:
        return f"{100 * self.relative:g} %" if self.relative is not None else f"{self.absolute:g}{unit}"


class OptimizationGoal(StrictModel):
    """The objective: a scalar `target`, or `pareto` over `pareto_objectives`."""

    target: OptimizationTarget = OptimizationTarget.THROUGHPUT
    sla: SLATarget | None = None
    pareto_objectives: list[OptimizationTarget] | None = None
    # The least share of requests that must meet every SLA bound (0.99: 99 %), a hard constraint for any target.
    sla_coverage: Number | None = Field(default=None, gt=0, le=1)
    # US dollars per GPU-hour: one price, or one per hardware SKU (the run's SKU must be listed).
    gpu_hour_usd: Number | dict[str, Number] | None = None
    # With several workloads: a candidate's score is its worst workload's (default) or their weighted mean.
    workload_score: Literal["worst", "weighted_mean"] | None = None
    # Which statistic of the finish's fresh-sample scores ranks the finished top: their mean (default), their
    # 10th percentile or the worst sample, for a deployment that must hold in a bursty hour. Needs a finish.
    robustness: Literal["mean", "p10", "worst"] | None = None
    # How close to the best finished deployment another must be shown to be (at 95 %, simultaneously) before a
    # cheaper one may be recommended in its place (results/confidence.py). Needs a finish; left out:
    # DEFAULT_EQUIVALENCE_SHARE of the best's statistic.
    equivalence_margin: EquivalenceMargin | None = None
    # The smallest share of traffic windows on which a failure must not go unseen before a deployment may be called
    # equivalent to the best (and so recommended for using fewer GPUs): the finish compares it on enough samples
    # for such a failure to show (results/rare_events.py). Needs a finish that can make claims; left out:
    # DEFAULT_RARE_EVENT_SHARE, which config/finish_settings.py's `rare_event_share` applies (left out, the field
    # stays None, so that a goal dumped and read back alone, as a trial spec holds it, is the same goal).
    rare_event_share: Number | None = Field(default=None, gt=0, lt=1)
    # `measured`: judge the SLA with its TTFT and ITL bounds tightened by the calibration's measured held-out error
    # (its upper quantile, replay/sla_adjust.py), so that no deployment is recommended on a simulated margin
    # smaller than the simulator's error. Needs a calibration that measured it (config/root.py checks).
    sla_safety: Literal["measured"] | None = None

    @model_serializer(mode="wrap")
    def _without_as_before_fields(self, handler: Any) -> dict[str, Any]:
        # A goal that leaves them out keeps the run ids and trial keys of before these fields existed.
        return without_defaults(handler(self), self, sla_safety=None, rare_event_share=None)

    @field_validator("equivalence_margin", mode="before")
    @classmethod
    def _bare_number_is_a_share(cls, value: object) -> object:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return {"relative": value}
        return value

    @field_validator("gpu_hour_usd", mode="after")
    @classmethod
    def _positive_prices(cls, price: float | dict[str, float] | None) -> float | dict[str, float] | None:
        prices = price if isinstance(price, dict) else {"": price} if price is not None else {}
        if isinstance(price, dict) and not price:
            raise ValueError("an empty price map prices nothing: give one price, or one per hardware SKU")
        bad = {sku or "price": value for sku, value in prices.items() if not value > 0}
        if bad:
            raise ValueError(f"a GPU-hour price is a positive number of US dollars, got {bad}")
        return price

    def coverage_miss(self, coverage: float) -> float:
        """How far a replay's share of requests within the SLA is from the floor, as an SLA ratio: the share
        that missed over the share allowed to miss (above 1: under the floor)."""
        return (1.0 - coverage) / max(1.0 - float(self.sla_coverage), 1e-3)

    def gpu_hour_price(self, sku: str) -> float | None:
        """The price per GPU-hour on `sku`, or None when no price was given."""
        if isinstance(self.gpu_hour_usd, dict):
            return float(self.gpu_hour_usd[sku]) if sku in self.gpu_hour_usd else None
        return None if self.gpu_hour_usd is None else float(self.gpu_hour_usd)

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
        if self.sla_coverage is not None and self.sla is None:
            raise ValueError(
                f"sla_coverage {self.sla_coverage} is the share of requests that meet goal.sla, and there is no "
                "goal.sla: set its bounds (ttft_ms, itl_ms or e2e_ms), or remove sla_coverage"
            )
        if self.sla is not None and not self.sla.is_constraint and not needing_sla and self.sla_coverage is None:
            targets = ", ".join(t.value for t in self.objectives)
            raise ValueError(
                f"goal.sla without a percentile only decides which requests count as goodput, and {targets} "
                "counts no goodput: the bounds would change nothing. "
                "Make them a constraint with goal.sla.percentile (50 for the median, 90/95/99 for a tail) or "
                "goal.sla_coverage (the share of requests that must meet them), or use a goodput target "
                "(goodput, goodput_per_gpu)"
            )
        needing_price = sorted(t.value for t in self.objectives if t.needs_price)
        if needing_price and self.gpu_hour_usd is None:
            raise ValueError(f"{needing_price} needs goal.gpu_hour_usd (US dollars per GPU-hour)")
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
