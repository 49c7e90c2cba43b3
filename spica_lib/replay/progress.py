"""Progress from inside a replay, and a time limit by its pace: a stop when its pace so far, kept up, overruns it.

ai-dynamo 1.5.1's native replay calls a scaling policy back every tick of simulated time with a
snapshot of the deployment (arrivals in the last window, requests held by each worker); raising
from the callback stops the replay, and a policy that changes nothing leaves the result exactly
as it is without one. `ProgressWatch` is such a policy: it counts requests finished (arrived, and
no longer held by a worker) against the replay's own CPU time, and once that CPU time is past a
floor, stops the replay when its pace so far (CPU seconds per request finished, the work), kept up
to the end, would overrun its limit. That is a forecast, not a bound (a trace heavy at its start can
have a light remainder): a replay it stops is recorded `timed_out` with what it saw, never as a
verdict on the candidate.

Between two ticks the watch sees nothing, and a replay can crawl there: a disagg SGLang deployment on the
12k-request conversation trace went from a tick every 5 ms of CPU to none for over 90 s (its decode queue
deep), its native loop holding the GIL all along, so no thread of its own process could look. So the watch
beats to the worker (`on_beat`, at most every BEAT_SECONDS of CPU: when its last tick ended and the slowest
interval between ticks so far), and the worker stops a replay whose last beat is more than STUCK_FACTOR
times that slowest interval old, and at least STUCK_FLOOR_SECONDS (replay/stall.py `stuck_stall`; not with a
planner, whose ticks are its own uneven adjustment intervals).
bench/pace_ratio.py replays what it stops without it.

It applies to every replay. With an autoscaling planner, whose own scaling policy needs the same slot,
the watch wraps the planner's policy: the planner keeps its own ticks and decisions (the watch adds no
tick and changes no answer, so the result is the planner's own), and the watch looks at each of those
ticks before handing it on. With an SLA it also carries the early stops (replay/early_stop.py), which
stop a replay only on bounds that hold whatever the rest does. Kept free of heavy imports: it runs in
the replay child.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from spica_lib.replay import stall
from spica_lib.replay.early_stop import EarlyStopWatch, ReplayStopped

FIRST_TICK_MS = 100.0  # simulated time to the first look; then the tick adapts to the replay's speed
MIN_TICK_MS, MAX_TICK_MS = 10.0, 60_000.0
CPU_PER_TICK = (0.05, 0.2)  # aim for a look every 0.05-0.2 CPU s: often enough to stop a crawl in time
# With early stops that can stop it, also about this many completions per tick: a window's TTFT sum then bounds
# its requests one by one (replay/early_stop.py), where a window of many completions bounds them only loosely.
# Fine ticks cost: on the 12k-request conversation trace a replay ticked ~7,000 times, 0.65 CPU s of its 4.4
# (Dynamo's snapshots, then the watch); a replay no rule can stop (no bar, no hard constraint) ticks coarsely.
COMPLETIONS_PER_TICK = 1


BEAT_SECONDS = 0.25  # the watch tells the worker where it is at most this often (CPU seconds)


class ReplayStalled(Exception):
    """Raised inside the replay's callback to stop it; `reason` says why."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


class ProgressWatch:
    """A do-nothing scaling policy that watches a replay's pace (see the module docstring)."""

    def __init__(
        self,
        requests: int,
        limit_seconds: float | None,
        floor_seconds: float | None,
        stops: EarlyStopWatch | None = None,
        on_beat: Callable[[dict[str, Any]], None] | None = None,
    ):
        self.requests = max(1, int(requests))
        self.limit_seconds = float(limit_seconds) if limit_seconds else None  # None: no limit to pace against
        self.floor_seconds = float(floor_seconds or 0.0)
        self.stops = stops
        # The planner's own scaling policy (Dynamo's replay adapter, set by watched_replay), or None: with one,
        # it schedules the ticks.
        self.planner: Any = None
        self.stopped_early: ReplayStopped | None = None
        self.arrived = 0
        self.finished = 0
        self.ticks = 0
        self.stopped: str | None = None
        self._tick_ms = FIRST_TICK_MS
        self._window_ms = FIRST_TICK_MS  # the window the last tick closed
        self._started: float | None = None  # the first tick: building the engines (a perf-DB load) is not pace
        self._last_cpu = 0.0
        # When the last tick ended (process CPU time) and the most CPU one interval between ticks took, beaten
        # to the worker by `on_beat` (replay/stall.py `stuck_stall`).
        self.on_beat = on_beat
        self.last_tick_cpu: float | None = None
        self.slowest_tick = 0.0
        self.now_ms = 0.0
        self._last_beat = float("-inf")

    def initial_tick_ms(self) -> float:
        return FIRST_TICK_MS if self.planner is None else float(self.planner.initial_tick_ms())

    def on_tick(self, snapshot: dict[str, Any]) -> dict[str, Any]:
        try:
            return self._on_tick(snapshot)
        finally:
            ended = time.process_time()
            if self.last_tick_cpu is not None and self.ticks > 1:
                self.slowest_tick = max(self.slowest_tick, ended - self.last_tick_cpu)
            self.last_tick_cpu = ended
            if self.on_beat is not None and self.ticks > 1 and ended - self._last_beat >= BEAT_SECONDS:
                self._last_beat = ended
                self.on_beat({"cpu_seconds": ended, "slowest_tick": self.slowest_tick, "finished": self.finished,
                              "requests": self.requests, "at_sim_ms": self.now_ms,
                              "planner": self.planner is not None})  # fmt: skip

    def _on_tick(self, snapshot: dict[str, Any]) -> dict[str, Any]:
        self.ticks += 1
        now_ms = self.now_ms = float(snapshot["now_ms"])
        traffic = snapshot.get("traffic") or {}
        self.arrived += int(traffic.get("num_req", 0) or 0)
        held = _held(snapshot)
        self.finished = max(self.finished, self.arrived - held)
        cpu = time.process_time()
        if self._started is None:
            self._started = self._last_cpu = cpu
        if self.stops is not None:
            try:
                self.stops.on_tick(now_ms, traffic, _queued_for_prefill(snapshot), _active_workers(snapshot))
            except ReplayStopped as stopped:
                self.stopped_early = stopped
                raise
        if self.limit_seconds is not None:
            self._judge(cpu - self._started, now_ms)
        if self.planner is not None:  # the planner decides, and names its next tick
            return self.planner.on_tick(snapshot)
        self._adapt(cpu - self._last_cpu, int(traffic.get("ttft_count", 0) or 0))
        self._last_cpu = cpu
        self._window_ms = self._tick_ms
        return {"target_prefill": None, "target_decode": None, "next_tick_ms": now_ms + self._tick_ms}

    def _judge(self, cpu: float, now_ms: float) -> None:
        assert self.limit_seconds is not None
        if cpu < self.floor_seconds:
            return
        done = self.finished / self.requests
        if done <= 0 and cpu < self.limit_seconds / 2:
            return  # nothing finished yet, and half the limit left: too early to forecast
        forecast = cpu / done if done > 0 else float("inf")
        limit, which = self.limit_seconds, f"max_eval_seconds={self.limit_seconds:g}"
        paced = self._pace_allows()
        if paced is not None and paced < limit:
            limit, which = paced, f"the {paced:.0f} s its prefix's pace allows ({stall.STALL_FACTOR:g}x its prediction)"
        if forecast <= limit:
            return
        self.stopped = (
            f"stalled: {self.finished} of {self.requests} requests finished after {cpu:.0f} CPU s "
            f"({now_ms / 1000:.0f} s simulated); at that pace the replay needs about {forecast:.0f} CPU s, "
            f"over {which} (a forecast: a time limit, not a verdict)"
        )
        raise ReplayStalled(self.stopped)

    def _pace_allows(self) -> float | None:
        """Past the pace checkpoint, the CPU the whole replay may take: the prefix's, and the rest's budget of
        replay/stall.py (STALL_FACTOR times what the prefix's pace predicts, at least the floor). The worker
        stops it there from outside; forecast from the ticks, a crawl is stopped as soon as its pace so far,
        kept up, would overrun it (bench/pace_ratio.py replays what it stops without it)."""
        checkpoint = self.stops.checkpoint if self.stops is not None else None
        fraction = self.stops.fraction if self.stops is not None else None
        if checkpoint is None or not fraction:
            return None
        prefix = float(checkpoint["cpu_seconds"])
        return prefix + stall.rest_budget(prefix, fraction, self.floor_seconds)[0]

    def _adapt(self, cpu_spent: float, completed: int) -> None:
        low, high = CPU_PER_TICK
        if cpu_spent < low:
            self._tick_ms = min(MAX_TICK_MS, self._tick_ms * 2)
        elif cpu_spent > high:
            self._tick_ms = max(MIN_TICK_MS, self._tick_ms / 2)
        if self.stops is not None and self.stops.judges and completed > COMPLETIONS_PER_TICK:
            self._tick_ms = max(MIN_TICK_MS, min(self._tick_ms, self._window_ms * COMPLETIONS_PER_TICK / completed))


def _held(snapshot: dict[str, Any]) -> int:
    """Requests some worker holds (running or queued, prefill or decode)."""
    fields = ("num_prefill_requests", "num_decode_requests", "num_queued_prefill", "num_queued_decode")
    workers = [*(snapshot.get("prefill_fpm_snapshots") or []), *(snapshot.get("decode_fpm_snapshots") or [])]
    return sum(int(worker.get(name, 0) or 0) for worker in workers for name in fields)


def _active_workers(snapshot: dict[str, Any]) -> tuple[int, int] | None:
    """The active prefill and decode workers (an agg deployment's are decode), or None when the snapshot has none."""
    if "active_prefill_count" not in snapshot or "active_decode_count" not in snapshot:
        return None
    return int(snapshot["active_prefill_count"] or 0), int(snapshot["active_decode_count"] or 0)


def _queued_for_prefill(snapshot: dict[str, Any]) -> int:
    """Requests waiting for their prefill on some worker (an agg worker's too; a decode worker has none)."""
    workers = [*(snapshot.get("prefill_fpm_snapshots") or []), *(snapshot.get("decode_fpm_snapshots") or [])]
    return sum(int(worker.get("num_queued_prefill", 0) or 0) for worker in workers)


def watched_replay(function: str, args: list[Any], kwargs: dict[str, Any], watch: ProgressWatch) -> Any:
    """The replay Dynamo's `run_*_trace_replay` runs, with `watch` as its scaling policy (wrapping the planner's
    when `kwargs` has a planner_config).

    The public entry points take no policy of the caller's; their native calls do. Raises ReplayStalled
    when the watch stopped the replay for its pace, ReplayStopped when an early stop's bound did, and
    Dynamo's errors otherwise.
    """
    from dynamo._core import run_mocker_synthetic_trace_replay, run_mocker_trace_replay
    from dynamo.replay.api import _materialize_offline_report

    # What the public wrappers keep for themselves (the planner's settings) is not the native call's.
    native_kwargs = {k: v for k, v in kwargs.items() if k not in PLANNER_KWARGS}
    native = run_mocker_trace_replay if function == "trace" else run_mocker_synthetic_trace_replay
    if function == "trace":
        args = [list(args[0]) if isinstance(args[0], list | tuple) else [args[0]], *args[1:]]

    def run() -> Any:
        try:
            return native(*args, **native_kwargs, scaling_policy=watch)
        except Exception as exc:
            if watch.stopped_early is not None:
                raise watch.stopped_early from exc
            if watch.stopped is not None:
                raise ReplayStalled(watch.stopped) from exc
            raise

    if kwargs.get("planner_config") is None:
        return _materialize_offline_report(run(), planner=None)
    with _planner_policy(kwargs) as planner:
        watch.planner = planner
        result = run()
        return _materialize_offline_report(result, planner=planner.finalize(result.lifecycle_operations))


PLANNER_KWARGS = ("planner_config", "performance_model_metadata", "benchmark_granularity")


def _planner_policy(kwargs: dict[str, Any]) -> Any:
    """The planner's scaling policy for a replay, as Dynamo's public replay builds it (a context: it owns the
    planner's set-up and clean-up)."""
    import json

    from dynamo.replay.planner import planner_replay_adapter

    planner_config = kwargs["planner_config"]
    return planner_replay_adapter(
        extra_engine_args=kwargs.get("extra_engine_args"),
        prefill_engine_args=kwargs.get("prefill_engine_args"),
        decode_engine_args=kwargs.get("decode_engine_args"),
        planner_config_arg=json.dumps(planner_config) if isinstance(planner_config, dict) else planner_config,
        performance_model_metadata=kwargs.get("performance_model_metadata"),
        benchmark_granularity=kwargs.get("benchmark_granularity", 8),
        capture_details=kwargs.get("capture_planner_details", True),
    )
