"""Loading Dynamo and the perf DBs into a process once, so the replays forked from it start warm.

A warm-up is a replay of a handful of requests per distinct set of timing sources. It runs Dynamo's
native code in this process, so it can fail in ways a Python `except Exception` does not see: a
Rust panic reaches Python as pyo3's `PanicException`, a `BaseException`; a hang never returns.
Each warm-up therefore runs on its own thread (the replay releases the GIL) with a time limit, and
any failure is recorded and never becomes the caller's: the replays then load what they need
themselves and report their own errors. A warm-up that hung is not tried again in this process,
and `hung()` says so: its thread may hold Dynamo's locks, so the warm host stops forking from
itself (spica_lib.host.server).
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any

from spica_lib.replay.call import execute_call

# A replay of a handful of requests: enough to load the perf DB behind a (system, backend, version).
WARM_UP_LOAD = {"function": "synthetic", "args": [128, 4, 2], "load": {"replay_concurrency": 1}, "stop": None, "pace": None}
# A warm-up takes 1-3 s (a planner's some more); one still running after this has hung.
WARM_UP_SECONDS = 120.0

# The groups this process has warmed, and those whose warm-up failed (signature -> reason). A
# process forked from it (a job forked by the sweep's warm host, a replay child) inherits both.
_WARMED: set[str] = set()
_FAILED: dict[str, str] = {}
_HUNG_PREFIX = "hung:"


def warm_up_call(call: dict[str, Any]) -> dict[str, Any]:
    """The same engines, router and planner as `call`, on a few tiny requests."""
    return {**call, **WARM_UP_LOAD}


def warm_up_groups(calls: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """One warm-up call per distinct set of engine timing sources (system, backend, version) and planner use."""
    groups: dict[str, dict[str, Any]] = {}
    for call in calls.values():
        engines = sorted(
            (args.get("aic_system"), args.get("aic_backend"), args.get("aic_backend_version"))
            for args in call["engines"].values()
        )
        signature = json.dumps([engines, call["kwargs"].get("planner_config") is not None])
        groups.setdefault(signature, warm_up_call(call))
    return groups


def warm_up(calls: dict[str, dict[str, Any]], limit_seconds: float = WARM_UP_SECONDS) -> float:
    """Load Dynamo and the perf DBs these calls need, in this process, once; return the seconds spent.

    Never raises for the warm-up's own failure (see the module's note); once one has hung, no
    other is started here.
    """
    started = time.perf_counter()
    for signature, call in warm_up_groups(calls).items():
        if signature in _WARMED or signature in _FAILED or hung():
            continue
        problem = _run_limited(call, limit_seconds)
        if problem is None:
            _WARMED.add(signature)
        else:
            _FAILED[signature] = problem
    return time.perf_counter() - started


def failures() -> dict[str, str]:
    """The warm-ups that failed in this process (or before its fork): signature -> reason."""
    return dict(_FAILED)


def hung() -> bool:
    """Whether a warm-up in this process (or before its fork) is still running past its limit."""
    return any(reason.startswith(_HUNG_PREFIX) for reason in _FAILED.values())


def _run_limited(call: dict[str, Any], limit_seconds: float) -> str | None:
    """Replay `call` on a daemon thread; None when it ended well, else why not."""
    outcome: list[str | None] = []

    def body() -> None:
        try:
            execute_call(call)
            outcome.append(None)
        except BaseException as exc:  # noqa: BLE001 - a panic in Dynamo is a BaseException; it is this warm-up's failure only
            outcome.append(f"{type(exc).__name__}: {exc}")

    thread = threading.Thread(target=body, name="spica-warm-up", daemon=True)
    thread.start()
    thread.join(limit_seconds)
    if thread.is_alive():
        return f"{_HUNG_PREFIX} still running after {limit_seconds:g} s"
    return outcome[0] if outcome else "ended without a result"
