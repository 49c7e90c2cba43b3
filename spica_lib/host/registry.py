"""Every job a rule script hands over, declared once: its body, what the warm host loads for it, where it may
run, and the cores and memory its rule asks for.

The host (spica_lib/host/server.py) and the pilots (spica_lib/pilot/node.py) run a job by its name here;
each rule script is one line (`spica_lib.pilot.rule_script.run_rule`) and the rules read `threads`, `mem_mb`
and `localrule` from here (workflow/rules/common.smk: job_threads, job_mem_mb, job_is_local, sized by
host/rule_asks.py). Bodies are named
"module:function" and imported on their first call, so a rule script, which only hands its job over,
imports none of them.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from spica_lib.run.job_args import JobArgs

Body = Callable[[JobArgs], None]
Steps = Callable[[JobArgs], list[Callable[[], Any]]]
Ref = str | Callable[..., Any]  # "module:function", or the function itself (tests' fake jobs)

# Where a job runs. "host": a local rule, in the sweep's warm host when it has one, else in its rule script's
# process. "cluster": a cluster job of its own (once per sweep, no replay: a pilot of its size would hold a
# CPU idle for its grace time). "pilot": a replaying job: a cluster job of its own, or, with pilots on
# (profiles/slurm `replay: pilots`), a local rule whose script hands the job to one of the sweep's pilots.
# "process": a local rule run in its rule script's own fresh process, never the host (a job that imports only
# what it needs there: the load predictor's scoring, spica_lib/predictor/dynamo.py lean_imports).
Placement = Literal["host", "cluster", "pilot", "process"]


def _resolve(ref: Ref) -> Callable[..., Any]:
    if callable(ref):
        return ref
    module, _, name = ref.partition(":")
    return getattr(importlib.import_module(module), name)


def sweep_cores(run: Any) -> int:
    """After the search no round job holds a core: the job takes the sweep's whole `parallel_evals`."""
    return max(1, run.parallel_evals)


def branch_share(run: Any) -> int:
    """A branch's finish share replays next to the other branches' rounds: its share of the cores."""
    return max(1, run.parallel_evals // len(run.modes))


def baseline_cores(run: Any) -> int:
    """As the finish, but at most three: there are at most three baselines."""
    return max(1, min(3, run.parallel_evals))


@dataclass(frozen=True)
class Job:
    """One kind of job. `run` is the planned run (spica_lib/run/layout.py RunLayout) for the sizes."""

    body: Ref
    prepare: Ref | None = None  # loaded in the host before it forks one (once per process: later ones fork warm)
    ahead: Ref | None = None  # JobArgs -> steps the host loads while one runs, for the jobs after it
    placement: Placement = "host"
    # Cores: a function of the run, or None for one (or, for `replay`, sized per job by its rule).
    threads: Callable[[Any], int] | None = None
    # SLURM mem_mb: "replays" is the run's `replay_mb` per thread (spica_lib/run/job_memory.py); None: none asked.
    memory: int | Literal["replays"] | None = None

    def run(self, job: JobArgs) -> None:
        use_run_folders(job)
        _resolve(self.body)(job)

    def prepare_step(self) -> Body | None:
        if self.prepare is None:
            return None
        prepare = _resolve(self.prepare)

        def prepare_for(job: JobArgs | None = None) -> None:
            if job is not None:
                use_run_folders(job)  # a warm-up may read a trace's kept scan
            prepare(job)

        return prepare_for

    def steps_ahead(self, job: JobArgs) -> list[Callable[[], Any]]:
        return [] if self.ahead is None else _resolve(self.ahead)(job)

    def cores(self, run: Any) -> int:
        return 1 if self.threads is None else self.threads(run)

    def mem_mb(self, replay_mb: int, threads: int) -> int | None:
        return replay_mb * threads if self.memory == "replays" else self.memory

    def is_local(self, pilots_on: bool) -> bool:
        """Snakemake's `localrule`: a pilot job is one while pilots are on (its script hands it to a pilot)."""
        return self.placement in ("host", "process") or (self.placement == "pilot" and pilots_on)


def use_run_folders(job: JobArgs) -> None:
    """The job's run keeps its traces' scans and resamples in its own folder (RunFiles): this process uses them
    for the job (spica_lib/traces/folders.py). A job of no run (the fleet's) leaves them as they are."""
    run_dir = job.params.get("run_dir")
    if run_dir:
        from spica_lib.run.layout import RunFiles  # here: a rule script that hands its job over never imports it
        from spica_lib.traces.folders import use_trace_folders

        use_trace_folders(RunFiles(dir=str(run_dir)).trace_folders())


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


def _import_plot_renderer() -> None:
    import matplotlib.backends.backend_agg  # noqa: F401 - the plots' renderer, loaded at the first save


def _read_release() -> None:
    from spica_lib.deploy.release import installed_release

    installed_release()  # imports Dynamo's profiler (and transformers with it): over a second


# The last two jobs' loads, each a short step: their prepares run them; a step ahead runs them one at a time.
REPORT_LOADS: tuple[Callable[[], None], ...] = (import_plots, _import_statistics, _import_plot_renderer)
DEPLOY_LOADS: tuple[Callable[[], None], ...] = (_read_release, _import_generator, _import_settings_sources)


def prepare_report(job: JobArgs | None = None) -> None:
    """Everything the report job imports before it writes a file (each is done once per process)."""
    for load in REPORT_LOADS:
        load()


def prepare_deploy(job: JobArgs | None = None) -> None:
    """Everything the deploy job imports before it writes a file (each is done once per process)."""
    for load in DEPLOY_LOADS:
        load()


def last_jobs_ahead(job: JobArgs) -> list[Callable[[], Any]]:
    """The report's and the deployment files' loads, to run while a job after the search (finish, stress,
    baselines, merge) runs: those two come last and are on every sweep's critical path, while these jobs
    leave the host idle."""
    return [*REPORT_LOADS, *DEPLOY_LOADS]


_RUN = "spica_lib.run.jobs"
_AFTER_SEARCH = f"{__name__}:last_jobs_ahead"

JOBS: dict[str, Job] = {
    # Seconds each: on a cluster, queueing would cost more than the scoring.
    "load_predictor_score": Job(f"{_RUN}.load_predictor:score", placement="process", memory=2000),
    "suggest": Job(
        f"{_RUN}.search:suggest", prepare=f"{_RUN}.search:prepare_suggest", ahead=f"{_RUN}.search:warm_up_for_branch"
    ),
    "refill": Job(f"{_RUN}.search:refill", prepare=f"{_RUN}.search:prepare_refill"),
    "replay": Job(
        f"{_RUN}.replay:replay", prepare=f"{_RUN}.replay:warm_up_for_replay", placement="pilot", memory="replays"
    ),
    "tell": Job(f"{_RUN}.search:tell"),
    "finish_share": Job(
        f"{_RUN}.finish_share:finish_share",
        prepare=f"{_RUN}.finish_share:warm_up_for_finish_share",
        placement="pilot",
        threads=branch_share,
        memory="replays",
    ),
    "finish": Job(
        f"{_RUN}.finish:finish",
        prepare=f"{_RUN}.finish:warm_up_for_finish",
        ahead=_AFTER_SEARCH,
        placement="pilot",
        threads=sweep_cores,
        memory="replays",
    ),
    "stress": Job(
        f"{_RUN}.stress:stress",
        prepare=f"{_RUN}.stress:warm_up_for_stress",
        ahead=_AFTER_SEARCH,
        placement="pilot",
        threads=sweep_cores,
        memory="replays",
    ),
    "capacity": Job(
        f"{_RUN}.capacity:capacity",
        prepare=f"{_RUN}.capacity:warm_up_for_capacity",
        placement="pilot",
        threads=sweep_cores,
        memory="replays",
    ),
    # Its search holds none of Snakemake's cores (threads 0, rules/baselines.smk says why).
    "aiconfigurator_pick": Job(
        f"{_RUN}.baselines:aiconfigurator_pick", placement="cluster", threads=lambda run: 0, memory=4000
    ),
    "baselines": Job(
        f"{_RUN}.baselines:baselines",
        prepare=f"{_RUN}.baselines:warm_up_for_baselines",
        ahead=_AFTER_SEARCH,
        placement="pilot",
        threads=baseline_cores,
        memory="replays",
    ),
    "merge": Job(f"{_RUN}.merge:merge", ahead=_AFTER_SEARCH),
    "report": Job("spica_lib.report.job:report", prepare=f"{__name__}:prepare_report"),
    "deploy": Job("spica_lib.deploy.job:deploy", prepare=f"{__name__}:prepare_deploy"),
    # The fleet's split, confirmed by replays (workflow/fleet.smk); its cores are the fleet workflow's.
    "fleet_plan": Job("spica_lib.fleet.jobs:plan", placement="pilot", memory="replays"),
}


def _import_vizier() -> None:
    from spica_lib.search.designers import import_vizier

    import_vizier()


# What the host loads as soon as it starts, before any request (each sweep's first suggest needs it).
AT_START: tuple[Callable[[], None], ...] = (_import_vizier,)


def runs_on_pilot(name: str) -> bool:
    """Whether job `name` is one the sweep's pilots run when it has them (every job that replays)."""
    return name in JOBS and JOBS[name].placement == "pilot"


def run_job_here(name: str, job: JobArgs) -> None:
    """Run job `name` in this process."""
    JOBS[name].run(job)


def preload() -> None:
    """Import what every kind of job uses (every Vizier designer, Dynamo's replay, the plots), without starting
    JAX or a replay: a pilot does it once before it takes jobs. The sweep's warm host loads each on demand."""
    from spica_lib.replay.call import import_dynamo
    from spica_lib.search.designers import import_designers

    import_plots()
    import_designers()
    import_dynamo()
