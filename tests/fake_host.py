"""A warm host serving fake jobs, to test the host's own control flow: `python tests/fake_host.py <owner pid>`;
`python tests/fake_host.py pilot <pilot arguments>` runs a pilot (spica_lib.pilot.node) with the same fakes.
A pilot's spool writes fail with ESTALE (injected, to test what a shared file system does) after
SPICA_FAKE_BEAT_WRITES beat writes, and every result write when SPICA_FAKE_RESULT_WRITES_FAIL=1.

The jobs and warm-ups are fakes (named so); the server, its socket, its peer check, its warm-up
thread and its forks are the real ones. Fake jobs:

- `report_env`: writes the child's environment, working folder and trace folders to output["out"], and whether Vizier was
  loaded when it forked (the real host's start step, registry.AT_START, is kept);
- `panicking_warm_up`: its warm-up runs a "replay" that raises pyo3's PanicException (a BaseException);
- `hanging_warm_up`: its warm-up runs a "replay" that never returns (the limit is cut to 1 s);
- `sleep`: sleeps params["seconds"], then writes output["out"];
- `slow_warm_up`: its warm-up sleeps params["warm_up_seconds"]; then `sleep`'s body;
- `with_steps_ahead`: writes output["out"]; after its fork, the host runs a fake step ahead that appends
  "first <host pid>" to params["steps"] and gives a second step, which appends "second <host pid>";
- `env_in_prepare`: its prepare step writes the host's own environment, pid and trace folders to
  params["prepared"]; then `report_env`'s body.
"""

from __future__ import annotations

import errno
import json
import os
import sys
import time
from pathlib import Path

from spica_lib.host import registry, server
from spica_lib.pilot import node
from spica_lib.replay import warm_up


class PanicException(BaseException):
    """What pyo3 raises in Python for a Rust panic (pyo3_runtime.PanicException derives from BaseException)."""


def fake_replay_that_panics(call, *args, **kwargs):
    raise PanicException("called `Option::unwrap()` on a `None` value")


def fake_replay_that_hangs(call, *args, **kwargs):
    while True:
        time.sleep(1)


def _warm_up_with(fake):
    def prepare(job):
        warm_up.execute_call = fake
        warm_up.warm_up({"x": {"engines": {"worker": {"aic_system": job.rule}}, "kwargs": {}}}, limit_seconds=1.0)

    return prepare


def report_env(job):
    from spica_lib.traces.folders import trace_folders

    seen = {"env": dict(os.environ), "cwd": os.getcwd(), "vizier_loaded": "vizier.algorithms" in sys.modules,
            "trace_folders": list(trace_folders())}  # fmt: skip
    Path(job.output["out"]).write_text(json.dumps(seen))


def sleep(job):
    time.sleep(float(job.params["seconds"]))
    Path(job.output["out"]).write_text("slept")


def slow_warm_up(job):
    time.sleep(float(job.params["warm_up_seconds"]))


def failing_spool_writes(write):
    """`write_model_file` with ESTALE injected: beats after SPICA_FAKE_BEAT_WRITES, results if asked."""
    beats_allowed = int(os.environ.get("SPICA_FAKE_BEAT_WRITES", "-1"))
    results_fail = os.environ.get("SPICA_FAKE_RESULT_WRITES_FAIL") == "1"
    written = [0]

    def fake_write(path, model):
        if path.parent.name == "pilots" and beats_allowed >= 0:
            written[0] += 1
            if written[0] > beats_allowed:
                raise OSError(errno.ESTALE, "Stale file handle (injected)", str(path))
        if path.parent.name == "results" and results_fail:
            raise OSError(errno.ESTALE, "Stale file handle (injected)", str(path))
        write(path, model)

    return fake_write


def report_prepare_env(job):
    from spica_lib.traces.folders import trace_folders

    seen = {"env": dict(os.environ), "pid": os.getpid(), "trace_folders": list(trace_folders())}
    Path(job.params["prepared"]).write_text(json.dumps(seen))


def fake_steps_ahead(job):
    def note(word):
        with open(job.params["steps"], "a") as out:
            out.write(f"{word} {os.getpid()}\n")

    note("first")
    return [lambda: note("second")]


def main() -> None:
    registry.JOBS.clear()
    Job = registry.Job
    registry.JOBS.update(
        {
            "report_env": Job(report_env),
            "panicking_warm_up": Job(report_env, prepare=_warm_up_with(fake_replay_that_panics)),
            "hanging_warm_up": Job(report_env, prepare=_warm_up_with(fake_replay_that_hangs)),
            "sleep": Job(sleep),
            "slow_warm_up": Job(sleep, prepare=slow_warm_up),
            "with_steps_ahead": Job(report_env, ahead=fake_steps_ahead),
            "env_in_prepare": Job(report_env, prepare=report_prepare_env),
        }
    )
    registry.preload = lambda: None  # nothing to import for fake jobs
    if sys.argv[1] == "pilot":
        node.write_model_file = failing_spool_writes(node.write_model_file)
        node.main(sys.argv[2:])
    else:
        server.serve(os.environ["SPICA_WARM_HOST"].partition("@")[0], int(sys.argv[1]))


if __name__ == "__main__":
    main()
