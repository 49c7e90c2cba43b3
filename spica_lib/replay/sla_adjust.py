"""What the replay cannot simulate, added where it is scored: a per-request fixed cost and a safety margin.

**The per-request fixed cost** (`ttft_overhead_ms`, c): a real stack's frontend, tokeniser, scheduler and
network add to every request's time to first token (and so to its end-to-end latency) what Dynamo 1.5.1's
mocker has no knob for (its calibration reaches only the step times: facts/calibration.py). For open-loop
traffic, adding c to every request's TTFT is the same as tightening the TTFT bound by c wherever a request is
judged against it, so the replay is asked for that: Dynamo counts goodput and the SLA share against
`bound - c`, the early stops' deadlines are `bound - c` (they stay sound: a request certain to miss `bound - c`
in the replay misses `bound` with c added), and the reported TTFT and E2E statistics are shifted by c after
the replay. For a closed loop, c also delays each client's next request; this is approximated by scaling the
throughputs by E / (E + c), E the replay's mean end-to-end latency (a loop of N clients completes N requests
per E + c instead of per E). The approximation is not checked against a replay: the mocker cannot delay a
client, so there is no replay to check it with (docs/fidelity/calibration.md says so).

**The safety margin** (`goal.sla_safety: measured`): where a calibration states how far its predictions were
from held-out silicon, the TTFT and ITL bounds are divided by 1 + the upper quantile of that error (how much
slower silicon was than predicted in 9 of 10 held-out rows), so that a deployment at the SLA's edge is not
recommended on a simulated margin smaller than the simulator's error. The bounds are tightened everywhere the
SLA judges a replay: Dynamo's goodput, the early stops, and the SLA statistic's hard constraint.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from spica_lib.config.goal import SLATarget

TTFT_SHIFTED = ("ttft_ms", "e2e_latency_ms")  # statistics of these gain c (mean_, p90_, ... of each)
THROUGHPUTS = (
    "request_throughput_rps", "input_throughput_tok_s", "output_throughput_tok_s", "total_throughput_tok_s",
    "goodput_request_throughput_rps", "goodput_output_throughput_tok_s",
)  # fmt: skip
SMALLEST_BOUND_MS = 1e-3  # a bound the overhead alone exhausts: nothing can meet it (and so nothing does)


class SlaAdjustment(BaseModel):
    """How the replay's SLA and metrics are adjusted for what it does not simulate (see the module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    ttft_overhead_ms: float = Field(default=0.0, ge=0)
    ttft_factor: float = Field(default=1.0, gt=0, le=1)  # the TTFT bound is multiplied by it (sla_safety)
    itl_factor: float = Field(default=1.0, gt=0, le=1)
    closed_loop: bool = False  # c also delays each client's next request
    source: str = ""  # where the numbers come from, in words

    @property
    def is_identity(self) -> bool:
        return self.ttft_overhead_ms == 0 and self.ttft_factor == 1 and self.itl_factor == 1


def scored_sla(sla: SLATarget | None, adjust: SlaAdjustment | None) -> SLATarget | None:
    """The SLA a replay's adjusted metrics are judged by: the bounds tightened by the safety factors."""
    if sla is None or adjust is None:
        return sla
    e2e_factor = min(adjust.ttft_factor, adjust.itl_factor)
    return sla.model_copy(update={
        "ttft_ms": None if sla.ttft_ms is None else sla.ttft_ms * adjust.ttft_factor,
        "itl_ms": None if sla.itl_ms is None else sla.itl_ms * adjust.itl_factor,
        "e2e_ms": None if sla.e2e_ms is None else sla.e2e_ms * e2e_factor,
    })  # fmt: skip


def replayed_sla(sla: SLATarget | None, adjust: SlaAdjustment | None) -> SLATarget | None:
    """The SLA the replay itself judges requests by: the scored SLA with the overhead taken off TTFT and E2E."""
    scored = scored_sla(sla, adjust)
    if scored is None or adjust is None or adjust.ttft_overhead_ms == 0:
        return scored
    c = adjust.ttft_overhead_ms
    return scored.model_copy(update={
        "ttft_ms": None if scored.ttft_ms is None else max(SMALLEST_BOUND_MS, scored.ttft_ms - c),
        "e2e_ms": None if scored.e2e_ms is None else max(SMALLEST_BOUND_MS, scored.e2e_ms - c),
    })  # fmt: skip


def replayed_bound(metric: str, bound: float, adjust: SlaAdjustment | None) -> float:
    """One (metric, bound) of a percentile SLA, as the replay's raw statistic must meet it."""
    if adjust is None:
        return bound
    factor = adjust.itl_factor if "itl" in metric else adjust.ttft_factor if "ttft" in metric else min(
        adjust.ttft_factor, adjust.itl_factor)  # fmt: skip
    shift = adjust.ttft_overhead_ms if any(name in metric for name in TTFT_SHIFTED) else 0.0
    return max(SMALLEST_BOUND_MS, bound * factor - shift)


def adjusted_metrics(metrics: dict[str, float], adjust: SlaAdjustment | None) -> dict[str, float]:
    """The replay's metrics with the overhead added (module docstring); the identity without one."""
    if adjust is None or adjust.ttft_overhead_ms == 0:
        return metrics
    c = adjust.ttft_overhead_ms
    out = dict(metrics)
    for name, value in metrics.items():
        if any(name.endswith(f"_{base}") for base in TTFT_SHIFTED) and not name.startswith(("std_", "num_")):
            out[name] = value + c
    e2e = metrics.get("mean_e2e_latency_ms")
    if adjust.closed_loop and e2e:
        for name in THROUGHPUTS:
            if name in out:
                out[name] = out[name] * e2e / (e2e + c)
    return out


def adjustment_fields(adjust: SlaAdjustment | None) -> dict[str, Any]:
    """The adjustment as recorded in a trial's sample (nothing when there is none)."""
    if adjust is None or adjust.is_identity:
        return {}
    return {"ttft_overhead_ms": adjust.ttft_overhead_ms, "sla_ttft_factor": adjust.ttft_factor,
            "sla_itl_factor": adjust.itl_factor}  # fmt: skip
