"""Per-stage log files: each rule script logs to the file its rule declares."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from pathlib import Path

FILE_ONLY = "file_only"  # log.info(..., extra={FILE_ONLY: True}): to the stage's log file, not stderr


@contextlib.contextmanager
def stage_log(path: str, keep: bool = False) -> Iterator[logging.Logger]:
    """A logger writing to `path` (and stderr) for the duration of one rule script.

    With `keep`, earlier runs' lines stay (a retried job's log then holds every attempt).
    """
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    logger = logging.getLogger("spica.stage")
    logger.setLevel(logging.INFO)
    logger.propagate = False  # libraries (absl via Vizier) configure the root logger; print once
    if not keep:
        Path(path).write_text("", encoding="utf-8")
    # Appending, so the handler reopens the file if a library closes every handler (Dynamo's planner
    # reconfigures logging when it loads); a closed "w" handler drops every later line silently.
    handlers = [logging.FileHandler(path, mode="a", encoding="utf-8"), logging.StreamHandler()]
    handlers[1].addFilter(lambda record: not getattr(record, FILE_ONLY, False))
    for handler in handlers:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
        logger.addHandler(handler)
    try:
        yield logger
    except Exception:
        logger.exception("stage failed")
        raise
    finally:
        for handler in handlers:
            logger.removeHandler(handler)
            handler.close()
