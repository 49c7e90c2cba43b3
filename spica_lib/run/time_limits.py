"""How long a cluster job that replays may run (SLURM's `runtime`, minutes), from what it replays.

Every workload of a trial is its own replay with its own `max_eval_seconds` limit, so a job's
replays are its trials times the run's workloads. They run `threads` at a time, in waves; each
wave may take the whole limit. A few minutes on top pay for the job's start and its warm-up.
"""

from __future__ import annotations

import math

UNLIMITED_REPLAY_SECONDS = 3600.0  # what a job assumes per replay when max_eval_seconds is off
JOB_MARGIN_MINUTES = 5


def replay_job_minutes(trials: int, workloads: int, threads: int, max_eval_seconds: float | None) -> int:
    """SLURM minutes for a job replaying `trials` trials on each of `workloads` workloads, `threads` at a time."""
    waves = math.ceil(max(1, trials * max(1, workloads)) / max(1, threads))
    return waves * math.ceil((max_eval_seconds or UNLIMITED_REPLAY_SECONDS) / 60) + JOB_MARGIN_MINUTES
