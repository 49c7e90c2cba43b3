"""Running a replay in a child process with a time limit, from the parent's side.

A replay cannot be interrupted from Python, so each one runs in a fresh process
(`spica_lib.replay.child`) that is killed at the time limit. The child reports a Dynamo error as
data; a child that leaves no report crashed or was killed.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict

from spica_lib.replay.request import ReplayOutcome, ReplayRequest, replay_call

STDERR_TAIL = 2000


class ChildReport(BaseModel):
    """What `spica_lib.replay.child` writes."""

    model_config = ConfigDict(extra="forbid")

    ok: bool
    outcome: ReplayOutcome | None = None
    error: str | None = None
    cpu_seconds: float


class ChildRun(BaseModel):
    model_config = ConfigDict(extra="forbid")

    status: Literal["ok", "failed", "timed_out"]
    reason: str | None = None
    report: ChildReport | None = None
    wall_seconds: float
    cpu_seconds: float


def run_in_child(request: ReplayRequest, timeout: float | None, per_request_path: str | None = None) -> ChildRun:
    """Run the replay in a fresh process (its own session, so a kill takes everything it started)."""
    with tempfile.TemporaryDirectory(prefix="spica-trial-") as folder:
        request_file, result_file, stderr_file = (Path(folder) / n for n in ("call.json", "result.json", "stderr.txt"))
        request_file.write_text(json.dumps(replay_call(request)), encoding="utf-8")
        command = [sys.executable, "-m", "spica_lib.replay.child", str(request_file), str(result_file)]
        if per_request_path:
            command.append(str(Path(per_request_path).resolve()))
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        with open(stderr_file, "wb") as stderr:
            child = subprocess.Popen(
                command,
                stdout=subprocess.DEVNULL,
                stderr=stderr,
                cwd=folder,  # anything the replay writes beside itself is removed with the folder
                env={**os.environ, "DYN_LOG": os.environ.get("DYN_LOG", "error")},
                start_new_session=True,
            )
            timed_out = _wait(child, timeout)
        wall = time.perf_counter() - started
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        if timed_out:
            reason = f"replay exceeded max_eval_seconds={timeout:g} and was stopped"
            return ChildRun(status="timed_out", reason=reason, wall_seconds=wall, cpu_seconds=cpu)
        if not result_file.is_file():
            tail = stderr_file.read_text(encoding="utf-8", errors="replace")[-STDERR_TAIL:].strip()
            reason = f"replay process died (exit code {child.returncode}): {tail}"
            return ChildRun(status="failed", reason=reason, wall_seconds=wall, cpu_seconds=cpu)
        report = ChildReport.model_validate_json(result_file.read_text(encoding="utf-8"))
        if not report.ok:
            return ChildRun(
                status="failed",
                reason=f"replay failed: {report.error}",
                report=report,
                wall_seconds=wall,
                cpu_seconds=cpu,
            )
        return ChildRun(status="ok", report=report, wall_seconds=wall, cpu_seconds=cpu)


def _wait(child: subprocess.Popen, timeout: float | None) -> bool:
    """Wait for the child; at the time limit kill its whole process group. True if it was killed."""
    try:
        child.wait(timeout=timeout)
        return False
    except subprocess.TimeoutExpired:
        try:
            os.killpg(child.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        child.wait()
        return True
