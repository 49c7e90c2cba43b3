"""Spica's progress view as a Snakemake logger plugin (`--logger spica`): `spica run` starts Snakemake with it.

Snakemake hands a logger plugin its log records; this one reads only the job events among them (the jobs
planned, each job's start, end and failure) and draws spica_lib/run/progress_view.py, which takes the rounds,
trials and best scores from the run folder. It writes no Snakemake text: under `spica run`, Snakemake's own
log goes, with everything its jobs print, to the run's logs/snakemake.log (spica_lib/run/launcher.py), and this
view is drawn on the terminal `spica run` hands over by descriptor (`--logger-spica-fd`). Without a descriptor
it draws on Snakemake's stderr in place of Snakemake's own text.

Snakemake finds a logger plugin by its top-level module name (`snakemake_logger_plugin_<name>`).
"""

import os
import threading
import time
from dataclasses import dataclass, field
from logging import LogRecord
from pathlib import Path
from typing import Optional

from snakemake_interface_logger_plugins.base import LogHandlerBase
from snakemake_interface_logger_plugins.common import LogEvent
from snakemake_interface_logger_plugins.settings import LogHandlerSettingsBase

from spica_lib.run.progress_view import ProgressView, SweepProgress

STDERR = 2
REDRAW_SECONDS = 1.0  # a terminal's block is drawn again this often, so the elapsed time and the trials move
REFRESH_SECONDS = 2.0  # the run folder is read again at most this often between job events


@dataclass
class LogHandlerSettings(LogHandlerSettingsBase):
    # Snakemake reads these annotations at run time to build its command line: plain Optional, no `X | None`.
    run_dir: Optional[str] = field(
        default=None,
        metadata={"help": "the sweep's run folder (results/<run>): the view reads its progress there",
                  "required": True, "type": str},
    )
    fd: Optional[int] = field(
        default=None,
        metadata={"help": "an open file descriptor to draw the view on, handed over by its owner (default: stderr)",
                  "type": int},
    )


class LogHandler(LogHandlerBase):
    def __post_init__(self) -> None:
        self._fd = STDERR if self.settings.fd is None else self.settings.fd
        stream = os.fdopen(os.dup(self._fd), "w", encoding="utf-8", errors="replace")
        live = stream.isatty()
        width = (os.get_terminal_size(self._fd).columns or 120) if live else 120  # a new pty may say 0
        self._progress = SweepProgress(run_dir=Path(self.settings.run_dir))
        self._view = ProgressView(self._progress, stream, live=live, width=width)
        self._lock = threading.Lock()
        self._last_read = 0.0
        self._stop = threading.Event()
        self._ticker = None
        if live:  # the elapsed time and the run folder's figures move between job events too
            self._ticker = threading.Thread(target=self._tick, name="spica-progress", daemon=True)
            self._ticker.start()

    # Snakemake's interface: what this handler does with records and where it writes.
    @property
    def writes_to_stream(self) -> bool:
        return self._fd == STDERR  # in place of Snakemake's own text; a handed-over descriptor is not its stream

    @property
    def writes_to_file(self) -> bool:
        return False

    @property
    def has_filter(self) -> bool:
        return True  # every record comes in; emit picks the job events (Snakemake's quiet settings are for its text)

    @property
    def has_formatter(self) -> bool:
        return True  # records are never formatted as text here

    @property
    def needs_rulegraph(self) -> bool:
        return False

    def emit(self, record: LogRecord) -> None:
        event = getattr(record, "event", None)
        with self._lock:
            if event == LogEvent.RUN_INFO:
                self._progress.planned(dict(getattr(record, "stats", {}) or {}))
                self._refresh(force=True)
            elif event == LogEvent.JOB_INFO:
                self._progress.job_started(int(record.jobid), str(record.rule_name))
                self._refresh(force=False)
            elif event == LogEvent.JOB_FINISHED:
                self._progress.job_finished(int(record.job_id))
                self._refresh(force=True)
            elif event == LogEvent.JOB_ERROR:
                # The error names the rule and the job's log files (its path says the branch and round).
                logs = [str(path) for path in getattr(record, "log", None) or []]
                text = self._progress.job_failed(str(record.rule_name), logs)
                self._view.say(text)
                return
            else:
                return
            self._view.update()

    def close(self) -> None:
        """The workflow ended: the last figures, drawn once more."""
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join(timeout=5)
        with self._lock:
            if not self._view.stream.closed:
                self._refresh(force=True)
                self._view.update()
                self._view.stream.close()
        super().close()

    def _refresh(self, force: bool) -> None:
        now = time.monotonic()  # read again on every job end, else at most every REFRESH_SECONDS
        if force or now - self._last_read >= REFRESH_SECONDS:
            self._last_read = now
            try:
                self._progress.refresh()
            except (OSError, ValueError):  # a file replaced while read: the next event reads it again
                pass

    def _tick(self) -> None:
        while not self._stop.wait(REDRAW_SECONDS):
            with self._lock:
                self._refresh(force=False)
                self._view.draw()
