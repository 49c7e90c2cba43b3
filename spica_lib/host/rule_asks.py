"""What a workflow's rules ask for, from the job table: each job's cores, memory and whether it is a local rule
(workflow/rules/common.smk reads these), and the refusal of a sweep one of whose replaying jobs could never get
its memory (workflow/Snakefile's `onstart`).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from spica_lib.host.registry import JOBS


@dataclass(frozen=True)
class RuleSizes:
    """A workflow's sizes for its rules: `per_replay_mb(name)` is what one replay of job `name` needs (MB),
    `pilots_on` whether the sweep hands its replaying jobs to pilots, `run` the planned run (a RunLayout: the
    sweep's jobs' cores are functions of it; None in the fleet's workflow, whose rules set their own)."""

    per_replay_mb: Callable[[str], int]
    pilots_on: bool = False
    run: Any = None

    def threads(self, name: str) -> int:
        return JOBS[name].cores(self.run)

    def mem_mb(self, name: str, threads: int) -> int | None:
        return JOBS[name].mem_mb(self.per_replay_mb(name), threads)

    def is_local(self, name: str) -> bool:
        return JOBS[name].is_local(self.pilots_on)


def sweep_sizes(run: Any, pilots_on: bool) -> RuleSizes:
    """One model's sweep: the search's replays replay its traffic (a sample of a long trace), every other job
    the whole trace."""
    return RuleSizes(lambda name: run.search_replay_mb if name == "replay" else run.replay_mb, pilots_on, run)


def _setting(mapping: Any, key: str) -> Any:
    """A profile's value as written (Snakemake wraps them); a plain name kept as an expression is that name."""
    value = mapping.get(key) if mapping else None
    try:
        return getattr(value, "value", value)
    except ValueError:  # kept as an expression to evaluate per job: a plain name is the name as written
        raw = getattr(value, "raw", None)
        return raw if isinstance(raw, str) and re.fullmatch(r"[\w.-]+", raw) else None


def replaying_job_asks(settings: Any, sizes: RuleSizes) -> dict[str, Any]:
    """Each replaying job's SLURM memory and partition as this invocation will ask (the profile's set-threads and
    set-resources, Snakemake's `resource_settings`, over the job table's sizes)."""
    from spica_lib.run.job_memory import JobAsk

    partition = _setting(settings.default_resources, "slurm_partition")
    asks = {}
    for name, job in JOBS.items():
        if job.memory != "replays" or name == "fleet_plan":  # the fleet's workflow sizes its own
            continue
        own = settings.overwrite_resources.get(name)
        # A replay job's threads vary by round (rules/search.smk): judged at the fewest unless the profile sets them.
        replays = int(_setting(settings.overwrite_threads, name) or sizes.threads(name))
        mem_mb = int(_setting(own, "mem_mb") or sizes.mem_mb(name, replays))
        asks[name] = JobAsk(mem_mb, _setting(own, "slurm_partition") or partition, replays, sizes.per_replay_mb(name))
    return asks


def memory_refusal(executor: str | None, settings: Any, sizes: RuleSizes) -> str | None:
    """Why a replaying job of the sweep could never get its memory, or None. Judged once Snakemake knows its
    `executor` (it does not while the Snakefile is parsed) and before any job runs."""
    from spica_lib.run.job_memory import cluster_refusal, machine_refusal, slurm_node_mb

    if executor == "slurm":
        # Each replaying job asks SLURM for its memory: one no node of its partition holds would pend for ever.
        return cluster_refusal(replaying_job_asks(settings, sizes), slurm_node_mb)
    if executor in ("local", None) and not sizes.pilots_on:
        # A local run replays the whole trace here (the finish): refused if one replay cannot fit.
        import psutil

        return machine_refusal(sizes.run.replay_mb, psutil.virtual_memory().total // 10**6)
    return None
