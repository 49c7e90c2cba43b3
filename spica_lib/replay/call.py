"""The replay call itself, as plain data in and plain data out (no pydantic; only the base file writer).

`ReplayCall` JSON: {"function": "trace" | "synthetic", "args": [...], "kwargs": {...}, "load": {the
traffic's kwargs}, "engines": {kwarg: MockEngineArgs kwargs}, "router_config": KvRouterConfig kwargs | null}. Kept
free of heavy imports so the child process that runs it starts fast (it runs once per trial).
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from spica_lib.base.artifacts import atomic_write_parquet


def execute_call(call: dict[str, Any], per_request_path: str | None = None) -> dict[str, Any]:
    """Run one replay call; return {"metrics", "scaling_events", "replay_seconds"}. Raises Dynamo's errors."""
    os.environ.setdefault("DYN_LOG", "error")
    from dynamo.llm import KvRouterConfig
    from dynamo.mocker import MockEngineArgs
    from dynamo.replay import run_synthetic_trace_replay, run_trace_replay

    kwargs = {**call["kwargs"], **call["load"]}
    kwargs.update({name: MockEngineArgs(**args) for name, args in call["engines"].items()})
    router = call.get("router_config")
    kwargs["router_config"] = KvRouterConfig(**router) if router is not None else None
    kwargs["capture_per_request"] = per_request_path is not None
    function = run_trace_replay if call["function"] == "trace" else run_synthetic_trace_replay
    started = time.perf_counter()
    report = function(*call["args"], **kwargs)
    seconds = time.perf_counter() - started
    if per_request_path is not None:
        _write_per_request(report, per_request_path)
    return _plain_outcome(report, seconds)


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
