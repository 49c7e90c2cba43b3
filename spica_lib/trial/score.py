"""Scoring a replay report for the goal, ranking candidates and finding the Pareto front.

GPU cost is time-averaged: `gpu_hours` over the replay's simulated duration, so a planner that
scales down between bursts is charged for what it actually held. Latency is minimised, everything
else maximised; a missing metric counts as the worst value (0, or +inf latency).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict

from spica_lib.config import OptimizationGoal, OptimizationTarget

MS_PER_HOUR = 3_600_000.0


COST_PER_MILLION = "cost_per_million_output_tokens"


def role_gpu_hours(report: dict[str, float], role: str) -> float | None:
    """GPU-hours one disagg role held in the replay (its worker-seconds times GPUs per worker)."""
    seconds, gpus = report.get(f"{role}_worker_seconds"), report.get(f"{role}_gpus_per_worker")
    return None if seconds is None or gpus is None else seconds * gpus / 3600.0


def cost_metrics(report: dict[str, float], gpu_hour_usd: float | dict[str, float]) -> dict[str, float]:
    """What the replay's GPU-hours cost, in total and per million output tokens (time-averaged GPUs:
    a planner that scales down is charged for what it held). Empty when the replay cannot tell.

    `gpu_hour_usd` is one price, or one per disagg role when the roles run on GPU types of different
    prices: each role is then charged its own GPU-hours at its own price.
    """
    gpu_hours, tokens = report.get("gpu_hours"), report.get("total_output_tokens")
    if not gpu_hours or gpu_hours <= 0:
        return {}
    if isinstance(gpu_hour_usd, dict):
        hours = {role: role_gpu_hours(report, role) for role in gpu_hour_usd}
        if any(value is None for value in hours.values()):
            return {}
        cost = sum(hours[role] * price for role, price in gpu_hour_usd.items())
    else:
        cost = gpu_hours * gpu_hour_usd
    per_million = {COST_PER_MILLION: cost / (tokens / 1e6)} if tokens and tokens > 0 else {}
    return {"cost_usd": cost, **per_million}


def sla_miss(metrics: dict[str, float], goal: OptimizationGoal) -> float:
    """The worst ratio of the SLA's statistic (mean, or its percentile) to its bound; above 1 is a miss."""
    ratios = [metrics.get(metric, math.inf) / bound for metric, bound in goal.sla.bounds()]
    worst = max(ratios, default=1.0)
    return worst if math.isfinite(worst) else 1e6


def sla_misses(metrics: dict[str, float], goal: OptimizationGoal) -> list[str]:
    """Each bound the SLA's statistic is over, in words (`p99_ttft_ms 2310 > 2000`)."""
    return [
        f"{metric} {metrics.get(metric, math.inf):.4g} > {bound:g}"
        for metric, bound in goal.sla.bounds()
        if not metrics.get(metric, math.inf) <= bound
    ]


def average_gpus(report: dict[str, float]) -> float:
    """GPUs held on average over the replay (0 when the report cannot tell)."""
    gpu_hours, duration_ms = report.get("gpu_hours"), report.get("duration_ms")
    if not gpu_hours or not duration_ms or gpu_hours <= 0 or duration_ms <= 0:
        return 0.0
    return gpu_hours / (duration_ms / MS_PER_HOUR)


def _per_gpu(value: float, report: dict[str, float]) -> float:
    gpus = average_gpus(report)
    return value / gpus if gpus > 0 else 0.0


def objective_value(report: dict[str, float], target: OptimizationTarget) -> float:
    """The raw (unsigned) value of one scalar target."""
    throughput = report.get("output_throughput_tok_s", 0.0)
    goodput = report.get("goodput_output_throughput_tok_s", 0.0)
    values = {
        OptimizationTarget.THROUGHPUT: lambda: throughput,
        OptimizationTarget.THROUGHPUT_PER_GPU: lambda: _per_gpu(throughput, report),
        OptimizationTarget.THROUGHPUT_PER_USER: lambda: report.get("mean_output_token_throughput_per_user", 0.0),
        OptimizationTarget.E2E_LATENCY: lambda: report.get("mean_e2e_latency_ms", math.inf),
        OptimizationTarget.GOODPUT: lambda: goodput,
        OptimizationTarget.GOODPUT_PER_GPU: lambda: _per_gpu(goodput, report),
        OptimizationTarget.COST_PER_MILLION_OUTPUT_TOKENS: lambda: report.get(COST_PER_MILLION, math.inf),
    }
    if target is OptimizationTarget.PARETO:
        raise ValueError("'pareto' has several objectives; use objective_vector and pareto_front")
    if target not in values:
        raise ValueError(f"unknown optimization target: {target!r}")
    return float(values[target]())


UNITS = {
    OptimizationTarget.THROUGHPUT: "tok/s",
    OptimizationTarget.THROUGHPUT_PER_GPU: "tok/s/GPU",
    OptimizationTarget.THROUGHPUT_PER_USER: "tok/s/user",
    OptimizationTarget.E2E_LATENCY: "ms",
    OptimizationTarget.GOODPUT: "tok/s",
    OptimizationTarget.GOODPUT_PER_GPU: "tok/s/GPU",
    OptimizationTarget.COST_PER_MILLION_OUTPUT_TOKENS: "US$/1M tok",
}


def score_text(score: float, target: OptimizationTarget, name: bool = True) -> str:
    """A score as people read it: the target's own quantity, positive, with its unit (`e2e_latency 2373 ms`).
    Scores are signed so that higher is better; a minimised target's is its negated value."""
    if target is OptimizationTarget.PARETO:
        return f"{score:.4g}"
    value = score if target.maximize else -score
    text = f"{value:.4g} {UNITS[target]}"
    return f"{target.value} {text}" if name else text


def signed_score(report: dict[str, float], target: OptimizationTarget) -> float:
    """Higher is better: the value for maximised targets, its negation for latency."""
    value = objective_value(report, target)
    return value if target.maximize else -value


def objective_vector(report: dict[str, float], objectives: Sequence[OptimizationTarget]) -> dict[str, float]:
    return {target.value: objective_value(report, target) for target in objectives}


class Candidate(BaseModel):
    """A scored deployment: its flat config, metrics, score (higher is better) and Pareto objectives."""

    model_config = ConfigDict(extra="forbid")

    config: dict[str, Any]
    used_gpus: int
    score: float
    metrics: dict[str, float]
    objectives: dict[str, float] | None = None


def make_candidate(
    config: dict[str, Any],
    report: dict[str, float],
    target: OptimizationTarget,
    pareto_objectives: Sequence[OptimizationTarget] | None = None,
) -> Candidate:
    metrics = {k: float(v) for k, v in report.items() if isinstance(v, int | float) and not isinstance(v, bool)}
    used = int(config.get("used_gpus", 0))
    if target is OptimizationTarget.PARETO:
        if not pareto_objectives:
            raise ValueError("a pareto candidate needs pareto_objectives")
        objectives = objective_vector(report, pareto_objectives)
        headline = objectives[pareto_objectives[0].value]
        return Candidate(config=config, used_gpus=used, score=headline, metrics=metrics, objectives=objectives)
    return Candidate(config=config, used_gpus=used, score=signed_score(report, target), metrics=metrics)
