"""The warm host process: `python -m spica_lib.host.server <socket name> <owner pid>`.

It imports Vizier's designers and Dynamo's replay once, and loads the perf DBs a replay job needs
the first time one asks (then never again). Each job that connects runs in a child forked from
it, with the job's own stdout, stderr, working folder and environment; the job's exit code goes
back to the rule script, which exits with it.

No process outlives its owner: the host asks the kernel for SIGTERM when the Snakemake process that
started it dies, and kills every job child on its way out; each child asks for SIGKILL when the
host dies (and its replay children for SIGKILL when it dies). A rule script that dies (Snakemake
cancelled the job) closes its connection, and the host then stops that job's child: SIGTERM, which
the replay worker answers by killing its replays, then SIGKILL. The socket is an abstract one
(no file): nothing is left on disk whatever ends the host.
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import signal
import socket
import sys
import time
import traceback
from dataclasses import dataclass
from typing import Any

from spica_lib.base.lifetime import die_with_parent
from spica_lib.host.client import HEADER, STARTED
from spica_lib.run.job import JobArgs

POLL_SECONDS = 0.02
REQUEST_TIMEOUT = 30.0
STOP_GRACE_SECONDS = 5.0


@dataclass
class _Job:
    pid: int
    connection: socket.socket
    stop_deadline: float | None = None  # set once the rule script has gone


class _Stop(Exception):
    """SIGTERM: the owner is ending (or died)."""


def serve(name: str, owner: int) -> None:
    die_with_parent(owner, signal.SIGTERM)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is Snakemake's to answer: it ends the jobs
    signal.signal(signal.SIGTERM, _raise_stop)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind("\0" + name)  # bound before the imports: an early job waits in the backlog, not refused
    listener.listen(64)
    jobs: dict[int, _Job] = {}
    try:
        from spica_lib.host.registry import preload

        preload()
        _loop(listener, jobs)
    except _Stop:
        pass
    finally:
        _kill_all(jobs)
        listener.close()


def _loop(listener: socket.socket, jobs: dict[int, _Job]) -> None:
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ, None)
    while True:
        for key, _ in selector.select(timeout=POLL_SECONDS):
            if key.data is None:
                job = _accept(listener, jobs)
                if job is not None:
                    jobs[job.pid] = job
                    selector.register(job.connection, selectors.EVENT_READ, job)
            else:  # the rule script closed its side (it was killed): stop its job
                selector.unregister(key.fileobj)
                job = key.data
                job.stop_deadline = time.monotonic() + STOP_GRACE_SECONDS
                _signal_job(job.pid, signal.SIGTERM)
        _reap(jobs, selector)


def _accept(listener: socket.socket, jobs: dict[int, _Job]) -> _Job | None:
    connection, _ = listener.accept()
    descriptors: list[int] = []
    try:
        connection.settimeout(REQUEST_TIMEOUT)
        name, job, request, descriptors = _read_request(connection)
        from spica_lib.host.registry import JOBS

        prepare, started = JOBS[name][1], time.perf_counter()
        if prepare is not None:
            prepare(job)  # loaded here once, so every later job forks warm
        request["prepare_seconds"] = time.perf_counter() - started
    except Exception:
        traceback.print_exc()  # a bad request or a failed warm-up: the rule script runs the job itself
        for descriptor in descriptors:
            os.close(descriptor)
        connection.close()
        return None
    connection.settimeout(None)
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        _job_child(name, job, request, descriptors, connection, jobs)
    with contextlib.suppress(OSError):  # also here, so a stop sent before the child ran reaches its group
        os.setpgid(pid, pid)
    for descriptor in descriptors:
        os.close(descriptor)
    connection.sendall(STARTED)
    return _Job(pid=pid, connection=connection)


def _read_request(connection: socket.socket) -> tuple[str, JobArgs, dict[str, Any], list[int]]:
    header, descriptors, _, _ = socket.recv_fds(connection, HEADER.size, 2)
    if len(header) != HEADER.size or len(descriptors) != 2:
        raise ValueError("malformed request header")
    (length,) = HEADER.unpack(header)
    body = bytearray()
    while len(body) < length:
        chunk = connection.recv(min(1 << 16, length - len(body)))
        if not chunk:
            raise ValueError("the request ended early")
        body.extend(chunk)
    request = json.loads(body)
    return request["job"], JobArgs.model_validate(request["args"]), request, descriptors


def _job_child(
    name: str,
    job: JobArgs,
    request: dict[str, Any],
    descriptors: list[int],
    connection: socket.socket,
    jobs: dict[int, _Job],
) -> None:
    """Body of a forked job: become the rule script's stand-in, run the job, exit with its code."""
    code = 1
    try:
        with contextlib.suppress(OSError):
            os.setpgid(0, 0)  # its own group: stopping the job reaches its replays too
        host = os.getppid()
        die_with_parent(host, signal.SIGKILL)
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, signal.SIG_DFL)
        connection.close()
        for other in jobs.values():
            other.connection.close()
        os.dup2(descriptors[0], 1)
        os.dup2(descriptors[1], 2)
        for descriptor in descriptors:
            os.close(descriptor)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        from spica_lib.host.registry import run_job_here
        from spica_lib.run.job import HOST

        HOST.hosted, HOST.prepare_seconds = True, request["prepare_seconds"]
        try:
            run_job_here(name, job)
            code = 0
        except SystemExit as stop:
            code = stop.code if isinstance(stop.code, int) else 1
        except BaseException:
            traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def _reap(jobs: dict[int, _Job], selector: selectors.BaseSelector) -> None:
    now = time.monotonic()
    for pid, job in list(jobs.items()):
        ended, status = os.waitpid(pid, os.WNOHANG)
        if ended == 0:
            if job.stop_deadline is not None and now > job.stop_deadline:
                _signal_job(pid, signal.SIGKILL)
            continue
        del jobs[pid]
        with contextlib.suppress(KeyError, ValueError):
            selector.unregister(job.connection)
        with contextlib.suppress(OSError):
            code = os.waitstatus_to_exitcode(status)
            job.connection.sendall(json.dumps({"exit": code if code >= 0 else 128 - code}).encode() + b"\n")
        job.connection.close()


def _kill_all(jobs: dict[int, _Job]) -> None:
    for pid in jobs:
        _signal_job(pid, signal.SIGKILL)
    for pid, job in jobs.items():
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)
        job.connection.close()
    jobs.clear()


def _signal_job(pid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signum)


def _raise_stop(signum: int, frame: Any) -> None:
    raise _Stop()


if __name__ == "__main__":
    serve(sys.argv[1], int(sys.argv[2]))
