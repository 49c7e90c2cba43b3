"""`python -m spica_lib.run.snakemake_main ARGS`: Snakemake's own command line, with Spica's progress view
registered as its logger plugin `spica` (snakemake_logger_plugin_spica) and its SIGTERM handler freed of a
deadlock (`stop_without_deadlock`): how `spica run` and `spica fleet` start Snakemake.

Snakemake looks for logger plugins among the top-level packages on sys.path named `snakemake_logger_plugin_*`.
An editable install (`make venv`) serves Spica's packages through an import hook instead, which that search does
not see, so the plugin is registered here by its module: `--logger spica` then works however Spica was installed.
"""

from __future__ import annotations

import sys


def stop_without_deadlock() -> None:
    """Make Snakemake's SIGTERM handler take no lock.

    Snakemake 9's handler (`JobScheduler.exit_gracefully`) takes the scheduler's `threading.Lock`, which its main
    thread holds while it finishes jobs; a SIGTERM arriving then (`spica run`'s death, or its forwarded stop) runs
    the handler in that same thread, which then waits on itself for ever: a sweep that never ends, seen on a
    stack dump. The handler only sets a flag and wakes the scheduler loop, neither of which needs the lock.
    """
    from snakemake.scheduling.job_scheduler import JobScheduler

    def exit_gracefully(self: JobScheduler, *args: object) -> None:
        self._user_kill = "graceful"
        self._open_jobs.release()

    JobScheduler.exit_gracefully = exit_gracefully


def main(argv: list[str] | None = None) -> None:
    import snakemake_logger_plugin_spica as plugin
    from snakemake.cli import main as snakemake_main
    from snakemake_interface_logger_plugins.registry import LoggerPluginRegistry

    LoggerPluginRegistry().register_plugin(plugin.__name__, plugin)
    stop_without_deadlock()
    snakemake_main(sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    main()
