"""The jobs a rule script can hand over: name -> body, and what the host loads before it forks one."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from spica_lib.report.job import report
from spica_lib.run.capacity_jobs import capacity, warm_up_for_capacity
from spica_lib.run.baseline_jobs import aiconfigurator_pick, baselines, warm_up_for_baselines
from spica_lib.run.job import JobArgs
from spica_lib.run.finish_share_jobs import finish_share, warm_up_for_finish_share
from spica_lib.run.stress_jobs import stress, warm_up_for_stress
from spica_lib.run.jobs import (
    finish,
    merge,
    refill,
    replay,
    prepare_refill,
    prepare_suggest,
    suggest,
    tell,
    warm_up_for_finish,
    warm_up_for_branch,
    warm_up_for_replay,
)

Body = Callable[[JobArgs], None]


def import_plots(job: JobArgs | None = None) -> None:
    """Matplotlib, headless (the report's plots)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot  # noqa: F401


def _import_statistics() -> None:
    import scipy.stats  # noqa: F401 - the ranking's intervals (results/confidence.py), ~0.9 s to import


def _import_generator() -> None:
    # The deployment files' generator, with the parts it imports only on its first call.
    import aiconfigurator.generator.api  # noqa: F401
    import aiconfigurator.generator.builders.k8s_builder  # noqa: F401
    import aiconfigurator.generator.facts.apply  # noqa: F401
    import aiconfigurator.generator.facts.request_resolution  # noqa: F401
    import aiconfigurator.generator.facts.resolve  # noqa: F401
    import aiconfigurator.generator.request  # noqa: F401
    import aiconfigurator.generator.sflow  # noqa: F401
    import jinja2.debug  # noqa: F401


def _import_settings_sources() -> None:
    # Where the deployment files read the replayed engine and frontend settings' flags and defaults.
    from spica_lib.base.dynamo_env import prepare_dynamo_import

    prepare_dynamo_import()
    import dynamo.frontend.frontend_args  # noqa: F401
    import dynamo.mocker  # noqa: F401
    import matplotlib.backends.backend_agg  # noqa: F401 - the plots' renderer, loaded at the first save


def _read_release() -> None:
    from spica_lib.report.release import installed_release

    installed_release()  # imports Dynamo's profiler (and transformers with it): over a second


# The report's loads, each a short step: its prepare runs them all; a step ahead runs them one at a time.
REPORT_LOADS: tuple[Callable[[], None], ...] = (
    import_plots, _import_statistics, _read_release, _import_generator, _import_settings_sources
)


def prepare_report(job: JobArgs | None = None) -> None:
    """Everything the report job imports before it writes a file (each is done once per process)."""
    for load in REPORT_LOADS:
        load()


def report_ahead(job: JobArgs) -> list[Callable[[], Any]]:
    """The report's loads, to run while a job after the search (finish, stress, baselines, merge) runs: the
    report comes last and is on every sweep's critical path, while these jobs leave the host idle."""
    return list(REPORT_LOADS)


# What a job needs loaded runs in the host itself (a replay job's warm-up, a suggest's designer, static
# estimate and warm-ups, the report's plots), so every later job of the kind forks with it done.
JOBS: dict[str, tuple[Body, Body | None]] = {
    "suggest": (suggest, prepare_suggest),
    "refill": (refill, prepare_refill),
    "replay": (replay, warm_up_for_replay),
    "tell": (tell, None),
    "finish_share": (finish_share, warm_up_for_finish_share),
    "finish": (finish, warm_up_for_finish),
    "stress": (stress, warm_up_for_stress),
    "capacity": (capacity, warm_up_for_capacity),
    "aiconfigurator_pick": (aiconfigurator_pick, None),
    "baselines": (baselines, warm_up_for_baselines),
    "merge": (merge, None),
    "report": (report, prepare_report),
}


def _import_vizier() -> None:
    from spica_lib.search.designers import import_vizier

    import_vizier()


# What the host loads as soon as it starts, before any request (each sweep's first suggest needs it).
AT_START: tuple[Callable[[], None], ...] = (_import_vizier,)


# What the host loads after it forks a job of this kind, while the job runs, for the jobs that follow it: a
# suggest's branch is warmed up for the replay jobs its round will ask for, one warm-up at a time, each when
# no request waits (spica_lib/host/server.py); the jobs after the search load the report's libraries.
AHEAD: dict[str, Callable[[JobArgs], list[Callable[[], Any]]]] = {
    "suggest": warm_up_for_branch,
    **{name: report_ahead for name in ("finish", "stress", "baselines", "merge")},
}


def run_job_here(name: str, job: JobArgs) -> None:
    """Run job `name` in this process."""
    JOBS[name][0](job)


def preload() -> None:
    """Import what every kind of job uses (every Vizier designer, Dynamo's replay, the plots), without starting
    JAX or a replay: a pilot does it once before it takes jobs. The sweep's warm host loads each on demand."""
    from spica_lib.replay.call import import_dynamo
    from spica_lib.search.designers import import_designers

    import_plots()
    import_designers()
    import_dynamo()
