"""The jobs a rule script can hand over: name -> body, and what the host loads before it forks one."""

from __future__ import annotations

from collections.abc import Callable

from spica_lib.report.job import report
from spica_lib.run.capacity_jobs import capacity, warm_up_for_capacity
from spica_lib.run.baseline_jobs import aiconfigurator_pick, baselines, warm_up_for_baselines
from spica_lib.run.job import JobArgs
from spica_lib.run.stress_jobs import stress, warm_up_for_stress
from spica_lib.run.jobs import (
    finish,
    merge,
    refill,
    replay,
    scan_traces_for_suggest,
    suggest,
    tell,
    warm_up_for_finish,
    warm_up_for_replay,
)

Body = Callable[[JobArgs], None]

# What a job needs loaded runs in the host itself (a replay job's warm-up, a suggest's trace scan),
# so every later job of the kind forks with it done.
JOBS: dict[str, tuple[Body, Body | None]] = {
    "suggest": (suggest, scan_traces_for_suggest),
    "refill": (refill, None),
    "replay": (replay, warm_up_for_replay),
    "tell": (tell, None),
    "finish": (finish, warm_up_for_finish),
    "stress": (stress, warm_up_for_stress),
    "capacity": (capacity, warm_up_for_capacity),
    "aiconfigurator_pick": (aiconfigurator_pick, None),
    "baselines": (baselines, warm_up_for_baselines),
    "merge": (merge, None),
    "report": (report, None),
}


def run_job_here(name: str, job: JobArgs) -> None:
    """Run job `name` in this process."""
    JOBS[name][0](job)


def preload() -> None:
    """Import what the jobs use (Vizier's designers, Dynamo's replay, the plots), without starting JAX or a replay."""
    import matplotlib

    from spica_lib.replay.call import import_dynamo
    from spica_lib.search.designers import import_designers

    matplotlib.use("Agg")
    import matplotlib.pyplot  # noqa: F401

    import_designers()
    import_dynamo()
