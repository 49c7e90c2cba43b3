"""A pilot's time: what SLURM says is left of its job, and what the keeper asks for so a job fits.

SLURM counts a job's time limit from the moment it starts the job, on the controller's clock. The pilot
asks `squeue -h -j $SLURM_JOB_ID -o %L` (time left, a duration) once it is ready to take jobs, so its
own start-up (a cold shared venv, the imports) is already counted and no clock is compared with
another's. The keeper asks for a job's runtime plus the pilot's safety margin plus `STARTUP_SECONDS`.
"""

from __future__ import annotations

import re
import subprocess

SAFETY_SECONDS = 60.0  # of its time limit a pilot keeps back: it takes no job that would end inside it
STARTUP_SECONDS = 300.0  # from SLURM starting a pilot to its first job: Python, imports (the keeper asks for it)
SQUEUE_SECONDS = 30.0
_TIME_LEFT = re.compile(r"^(?:(?:(\d+)-)?(\d+):)?(\d+):(\d+)$")  # [[D-]H:]M:S


def parse_time_left(text: str) -> float | None:
    """Seconds in squeue's `%L` ("D-HH:MM:SS", "HH:MM:SS", "MM:SS"); None for UNLIMITED, NOT_SET, INVALID."""
    found = _TIME_LEFT.match(text.strip())
    if found is None:
        return None
    days, hours, minutes, seconds = (int(part or 0) for part in found.groups())
    return float(((days * 24 + hours) * 60 + minutes) * 60 + seconds)


def slurm_time_left(job: str) -> float | None:
    """Seconds SLURM says job `job` has left, or None when squeue cannot say (down, no limit, not listed)."""
    try:
        done = subprocess.run(
            ["squeue", "-h", "-j", job, "-o", "%L"], capture_output=True, text=True, timeout=SQUEUE_SECONDS, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0:
        return None
    return parse_time_left(done.stdout.strip().splitlines()[0] if done.stdout.strip() else "")


def pilot_minutes(runtime_minutes: float, at_least: int) -> int:
    """The time limit to submit a pilot with for a job of `runtime_minutes`: its start-up and margin included."""
    return max(at_least, int(-(-(runtime_minutes * 60 + SAFETY_SECONDS + STARTUP_SECONDS) // 60)))
