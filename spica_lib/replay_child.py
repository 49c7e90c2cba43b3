"""Child-process entry point for one replay: `python -m spica_lib.replay_child REQUEST RESULT [PER_REQUEST]`.

Reads a `ReplayRequest` JSON file, runs it, and writes a `ChildReport` JSON file. A Dynamo error
is reported, not raised, so the parent can tell a failed replay from a crashed or killed child
(no result file at all).
"""

from __future__ import annotations

import sys
import time
import traceback

from pydantic import BaseModel, ConfigDict

from spica_lib.artifacts import atomic_write_text
from spica_lib.replay import ReplayOutcome, ReplayRequest, run_replay


class ChildReport(BaseModel):
    model_config = ConfigDict(extra="forbid")

    ok: bool
    outcome: ReplayOutcome | None = None
    error: str | None = None
    cpu_seconds: float


def main(argv: list[str]) -> int:
    request_path, result_path = argv[0], argv[1]
    per_request = argv[2] if len(argv) > 2 else None
    request = ReplayRequest.model_validate_json(open(request_path, encoding="utf-8").read())
    try:
        report = ChildReport(ok=True, outcome=run_replay(request, per_request), cpu_seconds=time.process_time())
    except Exception as exc:  # any replay failure becomes a recorded trial failure
        detail = f"{type(exc).__name__}: {exc}".strip()
        traceback.print_exc()
        report = ChildReport(ok=False, error=detail, cpu_seconds=time.process_time())
    atomic_write_text(result_path, report.model_dump_json())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
