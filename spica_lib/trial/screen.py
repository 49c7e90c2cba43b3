"""Prefix screening: which prefix of the workload a trial is screened on, if any.

A candidate that misses the SLA by a wide margin shows it within its first requests, and an
overloaded replay gets slower with every queued request (a deep queue made one real-trace replay
20x slower per request). So a trial with an SLA first replays `sweep.screen_fraction` of its
workload: for a synthetic workload the first requests, for an open-loop trace the first part of its
simulated time. Too short a prefix says nothing, so workloads whose prefix would hold fewer than
`MIN_SCREEN_REQUESTS` requests are replayed in full directly, as are closed-loop traces (their
arrivals do not follow the trace's clock).
"""

from __future__ import annotations

import math

from spica_lib.config import SmartSearchConfig, Workload
from spica_lib.config.trace import scan_trace
from spica_lib.replay.request import ScreenPlan

MIN_SCREEN_REQUESTS = 40


def screen_plan(
    config: SmartSearchConfig, concurrency: int | None, workload: Workload | None = None
) -> ScreenPlan | None:
    """The prefix to screen on for `workload` (default: the config's), or None to replay it in full."""
    goal, sweep, workload = config.goal, config.sweep, workload or config.workload
    if goal.sla is None or sweep.screen_fraction is None:
        return None
    fraction = sweep.screen_fraction
    common = {"bounds": goal.sla.bounds(), "margin": float(sweep.screen_margin), "fraction": fraction}
    if not workload.is_trace_based:
        total = workload.resolved_request_count(concurrency)
        requests = math.ceil(fraction * total)
        if requests < MIN_SCREEN_REQUESTS or requests >= total:
            return None
        common["fraction"] = requests / total
        return ScreenPlan(**common, requests=requests, prefix=f"first {requests} of {total} requests")
    if workload.replay_concurrency is not None:
        return None
    scan = scan_trace(workload.trace_path)
    if fraction * scan.records < MIN_SCREEN_REQUESTS or scan.duration_ms <= 0:
        return None
    simulated = fraction * scan.duration_ms / workload.arrival_speedup_ratio
    total = scan.duration_ms / workload.arrival_speedup_ratio
    return ScreenPlan(
        **common,
        sim_time_ms=simulated,
        prefix=f"first {simulated / 1000:.0f} s of {total / 1000:.0f} s simulated (~{fraction:.0%} of the trace)",
    )
