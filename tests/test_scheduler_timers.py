"""Snakemake's scheduler wake-up timers are cancelled once the sweep is over, and nothing else is."""

import threading
import types

from snakemake.scheduling.job_scheduler import JobScheduler

from spica_lib.run.scheduler_timers import cancel_scheduler_timers


def test_the_schedulers_wake_up_timers_are_cancelled_and_other_timers_run_on():
    woken = threading.Event()
    # The real Snakemake method starts the timer; the stand-in scheduler has only the semaphore it releases.
    scheduler = types.SimpleNamespace(_open_jobs=types.SimpleNamespace(release=woken.set))
    JobScheduler._schedule_reevalutation(scheduler, 60)
    (wake_up,) = [t for t in threading.enumerate() if isinstance(t, threading.Timer) and t.is_alive()
                  and t.interval == 60]  # fmt: skip
    unrelated = threading.Timer(60, lambda: None)
    unrelated.start()
    try:
        assert wake_up.is_alive() and not wake_up.daemon  # what held the interpreter's exit
        assert cancel_scheduler_timers() == 1
        wake_up.join(timeout=10)
        assert not wake_up.is_alive() and not woken.is_set()
        assert unrelated.is_alive()
    finally:
        unrelated.cancel()
        wake_up.cancel()
