"""The replay call itself, as plain data in and plain data out (no pydantic; only the base file writer).

`ReplayCall` JSON: {"function": "trace" | "synthetic", "args": [...], "kwargs": {...}, "load": {the
traffic's kwargs}, "engines": {kwarg: MockEngineArgs kwargs}, "router_config": KvRouterConfig kwargs | null,
"screen": {"args" | "kwargs": the prefix's changes, "bounds": [[metric, bound]], "margin", "prefix"} | null,
"pace": {"requests", and from the worker "limit_seconds", "floor_seconds"} | null (replay/progress.py)}.
Kept free of heavy imports so the child process that runs it starts fast (it runs once per trial).

With a screen and no planner, the one replay is judged from inside as it runs (replay/sla_watch.py):
it stops where its SLA rules it out, and a candidate that passes is not replayed twice. With a
planner (whose scaling policy takes the callback), the prefix is replayed first; when its worst SLA
ratio reaches the margin, the full replay is skipped (the prefix's metrics are returned, marked
screened). Either way a hopeless candidate costs seconds, not the minutes a deep queue makes the
simulator crawl for.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from typing import Any

from spica_lib.base.artifacts import atomic_write_parquet
from spica_lib.base.dynamo_env import prepare_dynamo_import


def execute_call(
    call: dict[str, Any], per_request_path: str | None = None, on_screen: Callable[[dict[str, Any]], None] | None = None
) -> dict[str, Any]:
    """Run one replay call (its screen first, if any); return {"metrics", "scaling_events", "replay_seconds",
    "screen"}. Raises Dynamo's errors.

    `on_screen(verdict)` hears the prefix's verdict as soon as it is known, before the full replay
    starts: if that replay is then stopped at its time limit, the prefix still says how it was going.
    """
    screen = call.get("screen")
    if not screen:
        return _replay(call, per_request_path)
    if call["kwargs"].get("planner_config") is None:  # the screen judges from inside the one replay
        return _replay(call, per_request_path, screen, on_screen)
    prefix_call = {
        **call,
        "args": screen.get("args", call["args"]),
        "kwargs": {**call["kwargs"], **screen.get("kwargs", {})},
        "screen": None,
        "pace": None,  # the prefix has its share of the limit (replay/stall.py); the watch paces the full replay
    }
    cpu = time.process_time()
    prefix = _replay(prefix_call, None)
    verdict = _verdict(prefix["metrics"], screen, prefix["replay_seconds"])
    verdict["cpu_seconds"] = time.process_time() - cpu  # what the worker paces the rest by (replay/stall.py)
    if verdict["screened"]:
        return {**prefix, "screen": verdict}
    if on_screen is not None:
        on_screen(verdict)
    return {**_replay(call, per_request_path), "screen": verdict}


NO_REQUEST_DONE = 1e6  # the ratio told when the prefix completed no request at all


def _verdict(metrics: dict[str, float], screen: dict[str, Any], seconds: float) -> dict[str, Any]:
    """The worst ratio of a prefix metric to its bound, and whether it reaches the screen's margin."""
    worst = ("", 0.0, 0.0)
    for metric, bound in screen["bounds"]:
        value = metrics.get(metric)
        if not metrics.get("completed_requests") or value is None or value != value:  # none done, or NaN
            worst = max(worst, (metric, 0.0, NO_REQUEST_DONE), key=lambda w: w[2])
        else:
            worst = max(worst, (metric, float(value), float(value) / bound), key=lambda w: w[2])
    metric, value, ratio = worst
    screened = ratio >= screen["margin"]
    return {"screened": screened, "metric": metric, "value": value, "ratio": ratio, "prefix": screen["prefix"],
            "replay_seconds": seconds}  # fmt: skip


def import_dynamo() -> None:
    """Import Dynamo's replay (a process that forks replays imports it once, before its first fork)."""
    prepare_dynamo_import()
    import dynamo.llm  # noqa: F401
    import dynamo.mocker  # noqa: F401
    import dynamo.replay  # noqa: F401


def _replay(
    call: dict[str, Any],
    per_request_path: str | None,
    screen: dict[str, Any] | None = None,
    on_screen: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    prepare_dynamo_import()
    from dynamo.llm import KvRouterConfig
    from dynamo.mocker import MockEngineArgs
    from dynamo.replay import run_synthetic_trace_replay, run_trace_replay

    kwargs = {**call["kwargs"], **call["load"]}
    kwargs.update({name: MockEngineArgs(**args) for name, args in call["engines"].items()})
    router = call.get("router_config")
    kwargs["router_config"] = KvRouterConfig(**router) if router is not None else None
    kwargs["capture_per_request"] = per_request_path is not None
    started = time.perf_counter()
    pace = call.get("pace") or {}
    sla = None
    if (pace.get("limit_seconds") or screen) and kwargs.get("planner_config") is None:  # a planner takes the slot
        from spica_lib.replay.progress import ProgressWatch, watched_replay
        from spica_lib.replay.sla_watch import ReplayScreened, SlaWatch

        requests = pace.get("requests") or (int(call["args"][2]) if call["function"] == "synthetic" else 1)
        sla = SlaWatch(screen, requests, on_screen) if screen else None
        watch = ProgressWatch(requests, pace.get("limit_seconds"), pace.get("floor_seconds"), sla)
        try:
            report = watched_replay(call["function"], call["args"], kwargs, watch)
        except ReplayScreened as screened:  # ruled out by its SLA on the way: its running metrics stand
            return {"metrics": screened.metrics, "scaling_events": [], "screen": screened.verdict,
                    "replay_seconds": time.perf_counter() - started}  # fmt: skip
    else:
        function = run_trace_replay if call["function"] == "trace" else run_synthetic_trace_replay
        report = function(*call["args"], **kwargs)
    seconds = time.perf_counter() - started
    if per_request_path is not None:
        _write_per_request(report, per_request_path)
    outcome = _plain_outcome(report, seconds)
    if sla is not None:  # ran to its end: the verdict told at its screen's point, or its own statistics'
        outcome["screen"] = sla.final_verdict(outcome["metrics"])
    return outcome


def _plain_outcome(report: Any, seconds: float) -> dict[str, Any]:
    summary = dict(report.summary) if hasattr(report, "summary") else dict(report)
    metrics = {k: float(v) for k, v in summary.items() if isinstance(v, int | float) and not isinstance(v, bool)}
    events = []
    planner = getattr(report, "planner", None)
    if planner is not None:
        metrics["planner_total_ticks"] = float(getattr(planner, "total_ticks", 0) or 0)
        events = [
            {"at_s": e.at_s, "component": str(e.component), "from_count": e.from_count, "to_count": e.to_count}
            for e in getattr(planner, "scaling_events", None) or []
        ]
    return {"metrics": metrics, "scaling_events": events, "replay_seconds": seconds}


def _write_per_request(report: Any, path: str) -> None:
    import pandas as pd

    # Nested per-request histories (routing, admissions) become JSON text columns.
    rows = [{k: json.dumps(v) if isinstance(v, list | dict) else v for k, v in r.items()} for r in report.per_request]
    atomic_write_parquet(path, pd.DataFrame(rows))
