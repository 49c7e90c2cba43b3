"""The replay worker: Dynamo loaded once per job, every replay in a child forked from the warm process.

A fresh process pays Dynamo's import and the perf-DB load (seconds) before its first simulated
step; a child forked from a process that has already replayed pays neither. Each replay still
runs in its own process, so a time limit is a kill and a crash is one failed trial, not a lost job.

No child outlives the worker: each child asks the kernel for SIGKILL when its parent dies
(`PR_SET_PDEATHSIG`, which also covers a SIGKILL of the worker; the kernel ties it to the forking
thread, so fork from a thread that lives as long as the worker), and the worker kills its
children itself on SIGTERM / SIGINT or any error. Results come back over pipes, so nothing is
written to disk that a kill could leave behind.
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from spica_lib.base.lifetime import die_with_parent
from spica_lib.replay.call import execute_call
from spica_lib.replay.progress import ReplayStalled
from spica_lib.replay.stall import (
    STALL_FLOOR_SECONDS,
    Stall,
    child_cpu_seconds,
    limit_reason,
    pace_stall,
    prefix_stall,
    stuck_stall,
)
from spica_lib.replay.stand_in import wait_out_stand_in
from spica_lib.replay.warm_up import warm_up

STDERR_TAIL = 2000
POLL_SECONDS = 0.05
# The signals that stop the worker (scancel and a time limit send SIGTERM to every process of the job).
STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


@dataclass
class ChildOutcome:
    """How one forked replay ended: its report (when it wrote one), or why not."""

    key: str
    status: str  # "ok" | "failed" | "timed_out"
    reason: str | None
    report: dict[str, Any] | None
    wall_seconds: float
    cpu_seconds: float
    checkpoint: dict[str, Any] | None = None  # the pace checkpoint, sent as soon as it is reached (see execute_call)


@dataclass
class _Running:
    key: str
    pid: int
    started: float
    deadline: float | None  # the time limit, in time.perf_counter() seconds
    stall: Stall | None = None  # when its CPU time says it has stalled (see spica_lib.replay.stall)
    stopped_for: str = ""  # why it was stopped early
    rules: dict[str, Any] | None = None  # the call's early stops and pace checkpoint, when it has them
    heard_checkpoint: bool = False
    stuck: Stall | None = None  # from its last beat: when it is stuck between two ticks (replay/stall.py)
    heard: int = 0  # how far into `out` the messages were read
    out: bytearray = field(default_factory=bytearray)
    err: bytearray = field(default_factory=bytearray)
    open_pipes: int = 2


class ReplayWorker:
    """Runs replay calls in forked children, `parallel` at a time, each killed at its time limit.

    Use as a context manager: leaving the block (normally, on an error, or on SIGTERM / SIGINT,
    which it turns into exceptions) kills every child still running.
    """

    def __init__(self, parallel: int = 1, timeout: float | None = None):
        self.parallel = max(1, parallel)
        self.timeout = timeout
        self.running: dict[int, _Running] = {}
        self._previous_handlers: dict[int, Any] = {}

    def __enter__(self) -> ReplayWorker:
        _STOPPED_BY.clear()
        if threading.current_thread() is threading.main_thread():  # only the main thread may set handlers
            for signum in STOP_SIGNALS:
                self._previous_handlers[signum] = signal.signal(signum, _raise_exit)
        return self

    def __exit__(self, *exc: object) -> None:
        self.kill_all()
        for signum, handler in self._previous_handlers.items():
            signal.signal(signum, handler)

    def warm(self, calls: dict[str, dict[str, Any]]) -> float:
        """Load Dynamo and the perf DBs these calls need (see `warm_up`); return the seconds spent."""
        return warm_up(calls)

    def run(
        self,
        calls: dict[str, dict[str, Any]],
        per_request: dict[str, str] | None = None,
        on_start: Callable[[str], None] | None = None,
    ) -> Iterator[ChildOutcome]:
        """Replay every call (key -> call), yielding each outcome as soon as its child ends.

        `on_start(key)` runs just before the child for that key is forked.
        """
        waiting = list(calls.items())
        selector = selectors.DefaultSelector()
        try:
            while waiting or self.running:
                while waiting and len(self.running) < self.parallel:
                    key, call = waiting.pop(0)
                    if on_start is not None:
                        on_start(key)
                    self._start(selector, key, call, (per_request or {}).get(key))
                for outcome in self._collect(selector):
                    _stop_if_signalled()  # an outcome seen after a stop signal is the stop's doing, not a result
                    yield outcome
        finally:
            selector.close()

    def kill_all(self) -> None:
        for pid in list(self.running):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)
            self.running.pop(pid, None)

    def _start(self, selector: selectors.BaseSelector, key: str, call: dict[str, Any], per_request: str | None) -> None:
        out_read, out_write = os.pipe()
        err_read, err_write = os.pipe()
        parent = os.getpid()
        sys.stdout.flush()
        sys.stderr.flush()
        if self.timeout and call.get("pace"):  # the replay paces itself against its limit (replay/progress.py)
            call = {**call, "pace": {**call["pace"], "limit_seconds": self.timeout, "floor_seconds": STALL_FLOOR_SECONDS}}
        # The stop signals wait while the child is forked and registered. Delivered during the fork, the
        # handler's exception was swallowed by the interpreter's at-fork hooks ("Exception ignored") and the
        # job went on; the child, not yet ignoring them, died of it and was recorded as a failed replay.
        # Held back until the child is in `running`, a stop now kills it and records nothing. Blocking the
        # signals in this thread is not enough: the kernel hands a process-directed signal to any thread that
        # does not block it (numpy's OpenBLAS starts one), and Python then runs the handler in this thread at its
        # next bytecode, between the fork and the registration. So the handler is also told to only note a stop
        # while `_HOLDING` (raised by `_stop_if_signalled` below, once the child is registered).
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
        _HOLDING.append(True)
        try:
            pid = os.fork()
            if pid == 0:  # the child never returns from here
                os.close(out_read)
                os.close(err_read)
                _child(parent, call, per_request, out_write, err_write, mask)
            os.close(out_write)
            os.close(err_write)
            started = time.perf_counter()
            deadline = started + self.timeout if self.timeout else None
            rules = call.get("stop")
            running = _Running(
                key=key,
                pid=pid,
                started=started,
                deadline=deadline,
                rules=rules,
                stall=prefix_stall(self.timeout, rules),
            )
            self.running[pid] = running
        finally:
            _HOLDING.pop()
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        _stop_if_signalled()
        for descriptor, stream in ((out_read, "out"), (err_read, "err")):
            os.set_blocking(descriptor, False)
            selector.register(descriptor, selectors.EVENT_READ, (running, stream))

    def _collect(self, selector: selectors.BaseSelector) -> Iterator[ChildOutcome]:
        """Read what the children wrote; yield the ones that ended or ran out of time."""
        for selected, _ in selector.select(timeout=POLL_SECONDS):
            running, stream = selected.data
            chunk = os.read(selected.fd, 1 << 16)
            if chunk:
                buffer = running.out if stream == "out" else running.err
                buffer.extend(chunk)
                if stream == "err" and len(buffer) > 4 * STDERR_TAIL:
                    del buffer[: -2 * STDERR_TAIL]
                elif stream == "out":
                    self._hear(running)
                continue
            selector.unregister(selected.fd)
            os.close(selected.fd)
            running.open_pipes -= 1
        now = time.perf_counter()
        for running in list(self.running.values()):
            if running.deadline is not None and now > running.deadline:
                running.stopped_for = limit_reason(self.timeout)
                yield self._end(selector, running, timed_out=True)
            elif (stall := _passed(running, child_cpu_seconds(running.pid))) is not None:
                running.stopped_for = stall.reason
                yield self._end(selector, running, timed_out=True)
            elif running.open_pipes == 0:
                yield self._end(selector, running, timed_out=False)

    def _hear(self, running: _Running) -> None:
        """Read the child's new complete messages: once the pace checkpoint arrives, the rest of the replay's CPU
        budget follows the prefix's pace; each beat moves the point past which it is stuck."""
        end = running.out.rfind(b"\n") + 1
        if end <= running.heard:
            return
        messages = _messages(running.out[running.heard : end])
        running.heard = end
        for message in messages:
            if "beat" in message:
                running.stuck = stuck_stall(message["beat"])
            elif "checkpoint" in message and not running.heard_checkpoint:
                running.heard_checkpoint = True
                running.stall = pace_stall(child_cpu_seconds(running.pid), running.rules, message["checkpoint"])

    def _end(self, selector: selectors.BaseSelector, running: _Running, timed_out: bool) -> ChildOutcome:
        if timed_out:
            with contextlib.suppress(ProcessLookupError):
                os.kill(running.pid, signal.SIGKILL)
        _, status, usage = os.wait4(running.pid, 0)
        del self.running[running.pid]
        for key, selected in list(selector.get_map().items()):
            if selected.data[0] is running:
                selector.unregister(key)
                os.close(key)
        wall = time.perf_counter() - running.started
        cpu = usage.ru_utime + usage.ru_stime
        # The child writes one JSON line per message: the pace checkpoint (when it reached one), then its report.
        messages = _messages(running.out)
        checkpoint = next((m["checkpoint"] for m in messages if "checkpoint" in m), None)
        base = {"key": running.key, "wall_seconds": wall, "cpu_seconds": cpu, "checkpoint": checkpoint}
        if timed_out:
            return ChildOutcome(status="timed_out", reason=running.stopped_for, report=None, **base)
        try:
            report = next(m for m in messages if "ok" in m)
        except StopIteration:
            tail = running.err.decode("utf-8", errors="replace")[-STDERR_TAIL:].strip()
            return ChildOutcome(status="failed", reason=f"{_death(status)}: {tail}", report=None, **base)
        if report.get("stalled"):  # the replay stopped itself: its pace could not make its limit
            return ChildOutcome(status="timed_out", reason=report["stalled"], report=None, **base)
        if not report["ok"]:
            return ChildOutcome(status="failed", reason=f"replay failed: {report['error']}", report=report, **base)
        return ChildOutcome(status="ok", reason=None, report=report, **base)


def _passed(running: _Running, cpu: float) -> Stall | None:
    """The stall whose CPU time the child is past (its pace or prefix limit, or stuck between two ticks), if any."""
    for stall in (running.stall, running.stuck):
        if stall is not None and cpu > stall.cpu_seconds:
            return stall
    return None


def _messages(out: bytearray | bytes) -> list[dict[str, Any]]:
    """The complete JSON lines a child wrote (a line cut short by a kill is left out)."""
    messages = []
    for line in out.decode("utf-8", errors="replace").splitlines():
        try:
            message = json.loads(line)
        except ValueError:
            continue
        if isinstance(message, dict):
            messages.append(message)
    return messages


def _child(
    parent: int, call: dict[str, Any], per_request: str | None, out: int, err: int, mask: set[signal.Signals]
) -> None:
    """Body of a forked child: replay, report over the pipe, exit without running the parent's cleanup.

    `mask`: the signal mask to restore once the stop signals are ignored (the fork ran with them blocked)."""
    code, started = 1, time.monotonic()
    try:
        # A stop signal meant for the whole job (scancel, Ctrl-C reach every process of it) must not
        # end a replay as if it had failed: the worker answers it and SIGKILLs its children, and
        # nothing is recorded for them. Our time limit and a parent's death are SIGKILLs.
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(signum, signal.SIG_IGN)
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)  # a stop that came during the fork is discarded here
        die_with_parent(parent, signal.SIGKILL)
        os.dup2(err, 2)

        def send(message: dict[str, Any]) -> None:
            data = (json.dumps(message) + "\n").encode("utf-8")
            while data:
                data = data[os.write(out, data) :]

        try:
            beat = (lambda b: send({"beat": b})) if call.get("pace", {}).get("limit_seconds") else None
            outcome = execute_call(call, per_request, lambda c: send({"checkpoint": c}), beat)
            report = {"ok": True, "outcome": outcome}
            wait_out_stand_in(call, started)  # benchmarks of the control flow only (replay/stand_in.py)
        except ReplayStalled as stall:  # stopped by its own pace: timed out, not failed
            report = {"ok": False, "stalled": stall.reason}
        except Exception as exc:  # a replay error is a result: the trial is recorded as failed
            traceback.print_exc()
            report = {"ok": False, "error": f"{type(exc).__name__}: {exc}".strip()}
        send(report)
        os.close(out)
        code = 0
    finally:
        os._exit(code)


def _death(status: int) -> str:
    if os.WIFSIGNALED(status):
        signum = os.WTERMSIG(status)
        return f"replay process killed by signal {signal.Signals(signum).name} ({signum})"
    return f"replay process died (exit code {os.waitstatus_to_exitcode(status)})"


_STOPPED_BY: list[int] = []  # the stop signal the worker got, if any (see _raise_exit)
_HOLDING: list[bool] = []  # non-empty while `_start` forks a child and registers it (see _raise_exit)


def _raise_exit(signum: int, frame: Any) -> None:
    # Noted as well as raised: where Python swallows a handler's exception (a __del__, a callback it
    # ignores errors of), the worker still stops at its next outcome instead of recording it. While a
    # child is forked and registered (`_HOLDING`), only noted: `_start` raises it once the child is known.
    _STOPPED_BY.append(signum)
    if not _HOLDING:
        raise SystemExit(128 + signum)


def _stop_if_signalled() -> None:
    if _STOPPED_BY:
        raise SystemExit(128 + _STOPPED_BY[0])
