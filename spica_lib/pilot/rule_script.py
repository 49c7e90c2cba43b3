"""What every rule script calls: its rule's job handed to whoever runs it, without choosing by hand.

A job its table entry lets a pilot run (spica_lib/host/registry.py, placement "pilot") goes to the sweep's
pilots when it has them (spica_lib/pilot/waiter.py); one of placement "process" runs in the script's own process;
every other job, and every job of a sweep without pilots, goes to the warm host, or runs in the script's own
process (spica_lib/host/client.py). The pilot
side is imported only when it is used: a rule script's start is on every job's critical path.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from spica_lib.pilot.settings import SPOOL_VARIABLE
from spica_lib.run.job_args import JobArgs


def run_rule(smk: Any) -> None:
    """A rule script: hand the job of the rule it runs for (its name is the job's) to whoever runs it."""
    from spica_lib.host.client import run_job_args

    name, job = smk.rule, JobArgs.from_snakemake(smk)
    if runs_in_its_own_process(name):
        from spica_lib.host.registry import run_job_here

        run_job_here(name, job)
        return
    spool = pilot_spool(name)
    if spool is None:
        run_job_args(name, job)
        return
    from spica_lib.pilot.waiter import run_on_pilot

    code = run_on_pilot(name, job, spool)
    if code != 0:
        sys.exit(code)


def runs_in_its_own_process(name: str) -> bool:
    """Whether job `name` runs in its rule script's own process whatever the sweep has (placement "process")."""
    from spica_lib.host.registry import JOBS

    return name in JOBS and JOBS[name].placement == "process"


def pilot_spool(name: str) -> str | None:
    """The sweep's pilot spool when job `name` is one its pilots run and this is not a SLURM job, else None."""
    from spica_lib.host.registry import runs_on_pilot

    spool = os.environ.get(SPOOL_VARIABLE)
    return spool if spool and runs_on_pilot(name) and "SLURM_JOB_ID" not in os.environ else None


