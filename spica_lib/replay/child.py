"""Child-process entry point for one replay: `python -m spica_lib.replay.child CALL RESULT [PER_REQUEST]`.

Reads a replay call (`spica_lib.replay.request.replay_call`, plain JSON), runs it and writes
`{"ok", "outcome" | "error", "cpu_seconds"}` as JSON. A Dynamo error is reported, not raised, so the
parent can tell a failed replay from a crashed or killed child (no result file at all). Imports
stay minimal: this process starts once per trial.
"""

from __future__ import annotations

import json
import sys
import time
import traceback

from spica_lib.base.artifacts import atomic_write_text
from spica_lib.replay.call import execute_call


def main(argv: list[str]) -> int:
    call_path, result_path = argv[0], argv[1]
    per_request = argv[2] if len(argv) > 2 else None
    with open(call_path, encoding="utf-8") as handle:
        call = json.load(handle)
    try:
        report = {"ok": True, "outcome": execute_call(call, per_request)}
    except Exception as exc:  # any replay failure becomes a recorded trial failure
        traceback.print_exc()
        report = {"ok": False, "error": f"{type(exc).__name__}: {exc}".strip()}
    report["cpu_seconds"] = time.process_time()
    atomic_write_text(result_path, json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
