"""Let Snakemake's process end as soon as its sweep has.

Snakemake's scheduler, each time it waits, starts a `threading.Timer` that wakes it again after
`--max-jobs-per-timespan`'s timespan (1 s by default). These timers are not daemon threads, so the
interpreter waits for the last one before it exits: every sweep ended up to a second after its last
job (measured in bench/sweep_profile.py, "Snakemake: end, after the last job"). Once the workflow has
succeeded or failed no scheduler is left to wake, so the Snakefile's `onsuccess` / `onerror` cancel
them. Only the scheduler's own timers are touched: any other Timer in the process runs on.
"""

from __future__ import annotations

import threading

# The method that starts them (snakemake.scheduling.job_scheduler, snakemake 9); tests/test_scheduler_timers.py
# makes one through the installed Snakemake, so a rename there fails a test rather than going unnoticed.
WAKE_UP_METHOD = "_schedule_reevalutation"


def cancel_scheduler_timers() -> int:
    """Cancel the scheduler's pending wake-up timers; returns how many were pending."""
    cancelled = 0
    for thread in threading.enumerate():
        function = getattr(thread, "function", None)
        if isinstance(thread, threading.Timer) and WAKE_UP_METHOD in getattr(function, "__qualname__", ""):
            thread.cancel()
            cancelled += 1
    return cancelled
