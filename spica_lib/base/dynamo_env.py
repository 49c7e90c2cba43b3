"""What a process sets before it imports Dynamo: its logging quiet, and nothing left behind in the temp folder.

Dynamo's planner modules configure logging when they are imported, and with SGLang's formatting on
that writes a logging-config JSON file to the temp folder that is never removed: seven files per
process that imports the planner (the load-predictor sweep, every planner replay). The replay never
runs SGLang, so that formatting is skipped.
"""

from __future__ import annotations

import os


def prepare_dynamo_import() -> None:
    os.environ.setdefault("DYN_LOG", "error")
    os.environ.setdefault("DYN_SKIP_SGLANG_LOG_FORMATTING", "1")
