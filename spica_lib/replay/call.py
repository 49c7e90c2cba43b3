"""The replay call itself, as plain data in and plain data out (no pydantic; only the base file writer).

`ReplayCall` JSON: {"function": "trace" | "synthetic", "args": [...], "kwargs": {...}, "load": {the
traffic's kwargs}, "engines": {kwarg: MockEngineArgs kwargs}, "router_config": KvRouterConfig kwargs | null,
"stop": the early stops' rules (replay/early_stop.py: requests, bounds, percentile, coverage, the pace
checkpoint's prefix_requests / prefix / fraction, and prune) | null, "pace": {"requests", and from the
worker "limit_seconds", "floor_seconds"} | null (replay/progress.py)}. Kept free of heavy imports so the
child process that runs it starts fast (it runs once per trial).

A replay is watched from inside as it runs: it stops where a sound bound rules it out
(replay/early_stop.py) or where its pace overruns its limit (replay/progress.py). With a planner, the
watch wraps the planner's scaling policy and looks only at the planner's own ticks.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from spica_lib.base.artifacts import atomic_write_parquet
from spica_lib.base.dynamo_env import prepare_dynamo_import


def import_dynamo() -> None:
    """Import Dynamo's replay (a process that forks replays imports it once, before its first fork)."""
    prepare_dynamo_import()
    import dynamo.llm  # noqa: F401
    import dynamo.mocker  # noqa: F401
    import dynamo.replay  # noqa: F401


def execute_call(
    call: dict[str, Any],
    per_request_path: str | None = None,
    on_checkpoint: Callable[[dict[str, Any]], None] | None = None,
    on_beat: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Run one replay call; return {"metrics", "scaling_events", "replay_seconds", "checkpoint"}, and "stop"
    (with no metrics: what it covered is in the stop) when an early stop's bound ended it. Raises Dynamo's errors.

    `on_checkpoint(checkpoint)` hears the pace checkpoint (the prefix's share of the requests completed,
    with the CPU time it took) as soon as it is reached: the worker paces the rest of the replay by it.
    `on_beat(beat)` hears where the replay is, at most every BEAT_SECONDS of CPU (replay/progress.py): the
    worker stops one that stops beating (replay/stall.py `stuck_stall`).
    """
    prepare_dynamo_import()
    from dynamo.llm import KvRouterConfig
    from dynamo.mocker import MockEngineArgs
    from dynamo.replay import run_synthetic_trace_replay, run_trace_replay

    kwargs = {**call["kwargs"], **call["load"]}
    kwargs.update({name: MockEngineArgs(**_engine_kwargs(args)) for name, args in call["engines"].items()})
    router = call.get("router_config")
    kwargs["router_config"] = KvRouterConfig(**router) if router is not None else None
    kwargs["capture_per_request"] = per_request_path is not None
    started = time.perf_counter()
    pace, rules = call.get("pace") or {}, call.get("stop")
    stops = None
    if pace.get("limit_seconds") or rules:
        from spica_lib.replay.early_stop import EarlyStopWatch, ReplayStopped
        from spica_lib.replay.progress import ProgressWatch, watched_replay

        requests = pace.get("requests") or (int(call["args"][2]) if call["function"] == "synthetic" else 1)
        stops = EarlyStopWatch(rules, on_checkpoint) if rules else None
        watch = ProgressWatch(requests, pace.get("limit_seconds"), pace.get("floor_seconds"), stops, on_beat)
        try:
            report = watched_replay(call["function"], call["args"], kwargs, watch)
        except ReplayStopped as stopped:  # a bound ruled it out on the way: what it covered is in the stop
            return {"metrics": {}, "scaling_events": [], "stop": stopped.stop, "checkpoint": stops.checkpoint,
                    "replay_seconds": time.perf_counter() - started}  # fmt: skip
    else:
        function = run_trace_replay if call["function"] == "trace" else run_synthetic_trace_replay
        report = function(*call["args"], **kwargs)
    seconds = time.perf_counter() - started
    if per_request_path is not None:
        _write_per_request(report, per_request_path)
    outcome = _plain_outcome(report, seconds)
    outcome["checkpoint"] = stops.checkpoint if stops is not None else None
    return outcome


def _engine_kwargs(args: dict[str, Any]) -> dict[str, Any]:
    """MockEngineArgs keyword arguments from plain data: an engine's own scheduler settings (`sglang`: chunked
    prefill size, prefill token budget, ...; `trtllm`: the capacity scheduler policy) are objects of their own."""
    nested = {"sglang", "trtllm"} & {key for key, value in args.items() if isinstance(value, dict)}
    if not nested:
        return args
    from dynamo.mocker import SglangArgs, TrtllmArgs

    kinds = {"sglang": SglangArgs, "trtllm": TrtllmArgs}
    return {**args, **{key: kinds[key](**args[key]) for key in nested}}


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
