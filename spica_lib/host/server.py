"""The warm host process: `python -m spica_lib.host.server <owner pid>`, its socket name in `SPICA_WARM_HOST`.

It loads what each kind of job needs the first time one asks, then never again: the sweep's Vizier designer
and its static estimate's engines for a suggest, Dynamo and the perf DBs for a replay, the plots for the
report (each job kind's prepare step, spica_lib/host/registry.py). Each job that connects runs in a child forked from
it, with the job's own stdout, stderr and working folder; the job's exit code goes back to the
rule script, which exits with it.

Only its owner may use it. The socket is an abstract one (no file is left on disk whatever ends
the host), so any local user can find and reach it: every connection's peer uid (`SO_PEERCRED`)
must be the host's own, else it is closed at once and nothing of it is read. The name stays out of
the command line. A job's child keeps the host's environment and takes from the caller only the
variables a job reads (`JOB_VARIABLES`), so no caller's `PATH` or `LD_PRELOAD` reaches it. The host takes
the same variables into its own environment before a job's prepare step: it starts before the sweep has set
them all. Where a job's traces' scans and resamples are kept is no variable: the job's run folder says
(registry.use_run_folders, for its prepare step and its body).

One caller never holds up another: requests are read as they arrive (a caller that sends nothing
is dropped after `REQUEST_SECONDS`), and a job's warm-up runs on a thread while the host goes on
accepting and reaping. Forks wait for the warm-up thread (a fork while it loads could copy a held lock).
After a job forks, a step ahead may load what the jobs after it will need (a suggest's: Dynamo's warm-ups
for its branch, while the suggest runs); it starts only when no request waits, so it delays no job that
has asked. A warm-up's own failure (even a Rust panic) is never the host's; one that
hangs (spica_lib.replay.warm_up) retires the host: it stops listening, so later jobs run in their
own processes, and it finishes the jobs it has.

No process outlives its owner: the host asks the kernel for SIGTERM when the Snakemake process that
started it dies, and kills every job child on its way out; each child asks for SIGKILL when the
host dies (and its replay children for SIGKILL when it dies). A rule script that dies (Snakemake
cancelled the job) closes its connection, and the host then stops that job's child: SIGTERM, which
the replay worker answers by killing its replays, then SIGKILL.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import selectors
import signal
import socket
import sys
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from spica_lib.base.lifetime import die_with_parent, signal_group
from spica_lib.host.client import ADDRESS_VARIABLE, HEADER, STARTED, job_environment, peer_uid
from spica_lib.host.forked_job import prepare_job, run_forked_job
from spica_lib.run.job_args import JobArgs

POLL_SECONDS = 0.02
REQUEST_SECONDS = 30.0
STOP_GRACE_SECONDS = 5.0
MAX_REQUEST_BYTES = 64 << 20


@dataclass
class _Job:
    pid: int
    connection: socket.socket
    stop_deadline: float | None = None  # set once the rule script has gone


@dataclass
class _Caller:
    """A connection whose request is still arriving."""

    connection: socket.socket
    deadline: float
    descriptors: list[int] = field(default_factory=list)
    length: int | None = None
    body: bytearray = field(default_factory=bytearray)


@dataclass
class _Request:
    """A whole request, waiting for its warm-up and its fork."""

    name: str
    job: JobArgs
    cwd: str
    env: dict[str, str]
    descriptors: list[int]
    connection: socket.socket
    prepare_seconds: float = 0.0


class _Stop(BaseException):
    """SIGTERM: the owner is ending (or died). A BaseException, so no job code's `except Exception` swallows it."""


class _Host:
    def __init__(self, listener: socket.socket):
        self.listener: socket.socket | None = listener
        self.selector = selectors.DefaultSelector()
        self.selector.register(listener, selectors.EVENT_READ, None)
        self.jobs: dict[int, _Job] = {}
        self.callers: dict[socket.socket, _Caller] = {}
        self.waiting: deque[_Request] = deque()
        # The warm-up thread at work: a request's prepare step (then its fork), or a step ahead (no fork).
        self.preparing: tuple[_Request | None, threading.Thread] | None = None
        self.ahead: deque[Callable[[], Any]] = deque()  # steps ahead still to run, one at a time, when no request waits
        self.next_steps: list[Callable[[], Any]] = []  # what the step ahead in progress gave to run after it

    def serve(self) -> None:
        while True:
            for key, _ in self.selector.select(timeout=POLL_SECONDS):
                if key.data is None:
                    self._accept()
                elif isinstance(key.data, _Caller):
                    self._read(key.data)
                else:  # the rule script closed its side (it was killed): stop its job
                    self._stop_job(key.data)
            self._drop_late_callers()
            self._advance()
            self._reap()

    # -- callers ---------------------------------------------------------------------------------

    def _accept(self) -> None:
        assert self.listener is not None
        try:
            connection, _ = self.listener.accept()
        except BlockingIOError:
            return
        uid = peer_uid(connection)
        if uid != os.getuid():
            print(f"spica host: refused a connection from uid {uid} (only uid {os.getuid()} may use it)", file=sys.stderr)
            connection.close()
            return
        connection.setblocking(False)
        caller = _Caller(connection=connection, deadline=time.monotonic() + REQUEST_SECONDS)
        self.callers[connection] = caller
        self.selector.register(connection, selectors.EVENT_READ, caller)

    def _read(self, caller: _Caller) -> None:
        try:
            complete = _read_some(caller)
        except (OSError, ValueError) as exc:
            print(f"spica host: dropped a request: {exc}", file=sys.stderr)
            self._drop(caller)
            return
        if complete:
            self._forget(caller)
            try:
                request = _parse(caller)
            except ValueError as exc:
                print(f"spica host: dropped a request: {exc}", file=sys.stderr)
                _close(caller.connection, caller.descriptors)
                return
            self.waiting.append(request)

    def _drop_late_callers(self) -> None:
        now = time.monotonic()
        for caller in [c for c in self.callers.values() if now > c.deadline]:
            print(f"spica host: dropped a caller that sent no whole request in {REQUEST_SECONDS:g} s", file=sys.stderr)
            self._drop(caller)

    def _forget(self, caller: _Caller) -> None:
        self.selector.unregister(caller.connection)
        del self.callers[caller.connection]

    def _drop(self, caller: _Caller) -> None:
        self._forget(caller)
        _close(caller.connection, caller.descriptors)

    # -- warm-up and fork ------------------------------------------------------------------------

    def _advance(self) -> None:
        """Finish the warm-up in progress, then start the next request's (forks wait for it: see module note);
        with no request waiting, the next step ahead."""
        if self.preparing is not None:
            request, thread = self.preparing
            if thread.is_alive():
                return
            self.preparing = None
            from spica_lib.replay.warm_up import hung

            if hung():
                self._retire()
                if request is not None:
                    _close(request.connection, request.descriptors)  # no "started": its rule script runs it itself
                return
            if request is not None:
                self._fork(request)
            self.ahead.extendleft(reversed(self.next_steps))
            self.next_steps = []
        from spica_lib.host.registry import JOBS

        while self.waiting and self.preparing is None:
            request = self.waiting.popleft()
            # The request's job variables (already filtered, `_parse`) into the host's own environment, for the
            # prepare step and the steps ahead after it: the Snakefile starts the host before it has set them all,
            # and the host serves that one sweep, whose jobs all carry the same. Here on the main thread, with
            # no warm-up thread running.
            os.environ.update(request.env)
            prepare = JOBS[request.name].prepare_step()
            if prepare is None:
                self._fork(request)
            else:
                thread = threading.Thread(target=_prepare, args=(prepare, request), name="spica-prepare", daemon=True)
                thread.start()
                self.preparing = (request, thread)
        if self.preparing is None and self.ahead and self.listener is not None:
            step = self.ahead.popleft()
            thread = threading.Thread(target=_step_ahead, args=(step, self.next_steps), name="spica-ahead", daemon=True)
            thread.start()
            self.preparing = (None, thread)

    def _fork(self, request: _Request) -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            self._close_in_child(request)
            _job_child(request)
        with contextlib.suppress(OSError):  # also here, so a stop sent before the child ran reaches its group
            os.setpgid(pid, pid)
        for descriptor in request.descriptors:
            os.close(descriptor)
        try:
            request.connection.setblocking(True)
            request.connection.sendall(STARTED)
        except OSError:
            pass  # the rule script is gone already: the reap below (or its closed socket) stops the job
        job = _Job(pid=pid, connection=request.connection)
        self.jobs[pid] = job
        self.selector.register(job.connection, selectors.EVENT_READ, job)
        from spica_lib.host.registry import JOBS

        if JOBS[request.name].ahead is not None:
            self.ahead.append(functools.partial(JOBS[request.name].steps_ahead, request.job))

    def _retire(self) -> None:
        """Stop taking jobs (a warm-up hung in this process): every later job runs in its own process."""
        print("spica host: a warm-up hung; jobs from now on run in their own processes", file=sys.stderr)
        if self.listener is not None:
            self.selector.unregister(self.listener)
            self.listener.close()
            self.listener = None
        for caller in list(self.callers.values()):
            self._drop(caller)
        while self.waiting:
            request = self.waiting.popleft()
            _close(request.connection, request.descriptors)

    def _close_in_child(self, request: _Request) -> None:
        """In a job's child: keep only the request's own descriptors (no listener, no other caller)."""
        self.selector.close()
        if self.listener is not None:
            self.listener.close()
        for caller in self.callers.values():
            _close(caller.connection, caller.descriptors)
        for other in self.waiting:
            _close(other.connection, other.descriptors)
        for job in self.jobs.values():
            job.connection.close()
        request.connection.close()

    # -- jobs ------------------------------------------------------------------------------------

    def _stop_job(self, job: _Job) -> None:
        self.selector.unregister(job.connection)
        job.stop_deadline = time.monotonic() + STOP_GRACE_SECONDS
        signal_group(job.pid, signal.SIGTERM)

    def _reap(self) -> None:
        now = time.monotonic()
        for pid, job in list(self.jobs.items()):
            ended, status = os.waitpid(pid, os.WNOHANG)
            if ended == 0:
                if job.stop_deadline is not None and now > job.stop_deadline:
                    signal_group(pid, signal.SIGKILL)
                continue
            del self.jobs[pid]
            with contextlib.suppress(KeyError, ValueError):
                self.selector.unregister(job.connection)
            with contextlib.suppress(OSError):
                code = os.waitstatus_to_exitcode(status)
                job.connection.sendall(json.dumps({"exit": code if code >= 0 else 128 - code}).encode() + b"\n")
            job.connection.close()

    def kill_all(self) -> None:
        for pid in self.jobs:
            signal_group(pid, signal.SIGKILL)
        for pid, job in self.jobs.items():
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)
            job.connection.close()
        self.jobs.clear()
        if self.listener is not None:
            self.listener.close()


def serve(name: str, owner: int) -> None:
    die_with_parent(owner, signal.SIGTERM)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is Snakemake's to answer: it ends the jobs
    signal.signal(signal.SIGTERM, _raise_stop)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind("\0" + name)  # bound before the imports: an early job waits in the backlog, not refused
    listener.listen(64)
    listener.setblocking(False)
    host = _Host(listener)
    try:
        # The job table only: what each kind of job needs (Vizier, Dynamo, the perf DBs, the plots) its first
        # job's prepare step loads here (spica_lib/host/registry.py), so the first jobs do not wait for the rest.
        from spica_lib.host.registry import AT_START

        # What every sweep's first suggest needs, loaded from the start. Started before any request is read, so
        # every job forks after it (the first request waits for it, as for any warm-up in progress).
        host.ahead.extend(AT_START)
        host._advance()
        host.serve()
    except _Stop:
        pass
    finally:
        host.kill_all()


def _read_some(caller: _Caller) -> bool:
    """Read what has arrived of the caller's request; True once it is whole. Raises on a bad one."""
    if caller.length is None:
        header, descriptors, _, _ = socket.recv_fds(caller.connection, HEADER.size, 2)
        caller.descriptors.extend(descriptors)
        if len(header) != HEADER.size or len(descriptors) != 2:
            raise ValueError("malformed request header")
        (caller.length,) = HEADER.unpack(header)
        if caller.length > MAX_REQUEST_BYTES:
            raise ValueError(f"a request of {caller.length} bytes")
    while len(caller.body) < caller.length:
        try:
            chunk = caller.connection.recv(min(1 << 16, caller.length - len(caller.body)))
        except BlockingIOError:
            return False
        if not chunk:
            raise ValueError("the request ended early")
        caller.body.extend(chunk)
    return True


def _parse(caller: _Caller) -> _Request:
    try:
        request = json.loads(caller.body)
        from spica_lib.host.registry import JOBS

        if request["job"] not in JOBS:
            raise ValueError(f"no job named {request['job']!r}")
        return _Request(
            name=request["job"],
            job=JobArgs.model_validate(request["args"]),
            cwd=str(request["cwd"]),
            env=job_environment(request["env"]),
            descriptors=caller.descriptors,
            connection=caller.connection,
        )
    except (KeyError, TypeError, json.JSONDecodeError) as exc:
        raise ValueError(f"malformed request: {exc}") from exc
    except Exception as exc:  # pydantic's ValidationError
        raise ValueError(str(exc)) from exc


def _prepare(prepare: Any, request: _Request) -> None:
    """On the warm-up thread: load what the job needs, so it (and every later job of its kind) forks warm."""
    request.prepare_seconds = prepare_job(prepare, request.job)


def _step_ahead(step: Callable[[], Any], then: list[Callable[[], Any]]) -> None:
    """On the warm-up thread: load what later jobs will need. A step may return further steps (each a short
    one, so that a request that comes meanwhile waits for one of them only), which go into `then`. Its failure
    is nobody's: each of those jobs loads what it needs itself (and reports its own errors)."""
    try:
        then.extend(step() or [])
    except BaseException:  # noqa: BLE001 - a Rust panic is a BaseException
        traceback.print_exc()


def _job_child(request: _Request) -> None:
    """Body of a forked job: become the rule script's stand-in, run the job, exit with its code."""
    run_forked_job(request.name, request.job, request.cwd, request.env, request.descriptors, request.prepare_seconds)


def _close(connection: socket.socket, descriptors: list[int]) -> None:
    for descriptor in descriptors:
        with contextlib.suppress(OSError):
            os.close(descriptor)
    descriptors.clear()
    connection.close()


def _raise_stop(signum: int, frame: Any) -> None:
    raise _Stop()


if __name__ == "__main__":
    serve(os.environ[ADDRESS_VARIABLE].partition("@")[0], int(sys.argv[1]))
    # Every job child is reaped and the socket closed: skip the interpreter's teardown of JAX, Dynamo and the
    # perf DBs, which holds the sweep's end for about a second (Snakemake waits for the host to exit).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
