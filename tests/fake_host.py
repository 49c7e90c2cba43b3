"""A warm host serving fake jobs, to test the host's own control flow: `python tests/fake_host.py <owner pid>`;
`python tests/fake_host.py pilot <pilot arguments>` runs a pilot (spica_lib.pilot.node) with the same fakes.

The jobs and warm-ups are fakes (named so); the server, its socket, its peer check, its warm-up
thread and its forks are the real ones. Fake jobs:

- `report_env`: writes the child's environment and working folder to output["out"];
- `panicking_warm_up`: its warm-up runs a "replay" that raises pyo3's PanicException (a BaseException);
- `hanging_warm_up`: its warm-up runs a "replay" that never returns (the limit is cut to 1 s);
- `sleep`: sleeps params["seconds"], then writes output["out"];
- `with_steps_ahead`: writes output["out"]; after its fork, the host runs a fake step ahead that appends
  "first <host pid>" to params["steps"] and gives a second step, which appends "second <host pid>".
"""

from __future__ import annotations

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
    Path(job.output["out"]).write_text(json.dumps({"env": dict(os.environ), "cwd": os.getcwd()}))


def sleep(job):
    time.sleep(float(job.params["seconds"]))
    Path(job.output["out"]).write_text("slept")


def fake_steps_ahead(job):
    def note(word):
        with open(job.params["steps"], "a") as out:
            out.write(f"{word} {os.getpid()}\n")

    note("first")
    return [lambda: note("second")]


def main() -> None:
    registry.JOBS.clear()
    registry.JOBS.update(
        {
            "report_env": (report_env, None),
            "panicking_warm_up": (report_env, _warm_up_with(fake_replay_that_panics)),
            "hanging_warm_up": (report_env, _warm_up_with(fake_replay_that_hangs)),
            "sleep": (sleep, None),
            "with_steps_ahead": (report_env, None),
        }
    )
    registry.AHEAD.clear()
    registry.AHEAD["with_steps_ahead"] = fake_steps_ahead
    registry.preload = lambda: None  # nothing to import for fake jobs
    if sys.argv[1] == "pilot":
        node.main(sys.argv[2:])
    else:
        server.serve(os.environ["SPICA_WARM_HOST"].partition("@")[0], int(sys.argv[1]))


if __name__ == "__main__":
    main()
