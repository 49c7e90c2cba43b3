"""A job run in a child forked from a warm process (the sweep's warm host, or a SLURM pilot), and the
prepare step that warms that process for it: the one place both kinds of warm process share.

The prepare step loads, in the warm process, what every later job of its kind needs, so each forks warm. A
failure there is the job's, not the warm process's: it is printed and the job forks anyway, where it meets
the same problem and reports it in its own log.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
import traceback
from typing import TYPE_CHECKING, Any

from spica_lib.base.lifetime import die_with_parent
from spica_lib.host.client import job_environment

if TYPE_CHECKING:  # the pilot imports this module before it needs the job models
    from spica_lib.run.job_args import JobArgs


def prepare_job(prepare: Any, job: JobArgs) -> float:
    """Run a job kind's prepare step (None: it has none) in the warm process; return the seconds it took."""
    started = time.perf_counter()
    if prepare is not None:
        try:
            prepare(job)
        except BaseException:  # noqa: BLE001 - a Rust panic is a BaseException; the job's problem, not ours
            traceback.print_exc()
    return time.perf_counter() - started


def run_forked_job(
    name: str,
    job: JobArgs,
    cwd: str,
    env: dict[str, str],
    descriptors: list[int],
    prepare_seconds: float,
    pilot: str = "",
) -> None:
    """In a child forked from a warm process (this host, or a pilot): run job `name` and exit with its code.

    `descriptors` are the job's stdout and stderr; the job variables of `env` (`job_environment`, the one
    filter for both) replace the warm process's.
    """
    code = 1
    try:
        with contextlib.suppress(OSError):
            os.setpgid(0, 0)  # its own group: stopping the job reaches its replays too
        die_with_parent(os.getppid(), signal.SIGKILL)
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, signal.SIG_DFL)
        os.dup2(descriptors[0], 1)
        os.dup2(descriptors[1], 2)
        for descriptor in descriptors:
            os.close(descriptor)
        os.chdir(cwd)
        for variable in job_environment(dict(os.environ)):
            del os.environ[variable]
        os.environ.update(
            job_environment(env)
        )  # whoever forked it (this host, a pilot): the caller's job variables only
        from spica_lib.host.registry import run_job_here
        from spica_lib.run.job_args import HOST

        HOST.hosted, HOST.prepare_seconds, HOST.pilot = True, prepare_seconds, pilot
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
