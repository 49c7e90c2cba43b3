"""Fake `sbatch`, `squeue` and `scancel` (named so), to test the pilots' and keeper's control flow against the
faults a cluster produces: `python tests/fake_slurm.py STATE COMMAND ARGS...`, called through the wrapper
scripts `FakeSlurm` (tests/test_pilot_faults.py) puts first on PATH.

- `sbatch --wrap CMD`: runs CMD at once on this machine in a session of its own, with SLURM_JOB_ID set and
  stdout/stderr to `--output` (`%j` the job id). The pilot command's `-m spica_lib.pilot.node` is run as
  `tests/fake_host.py pilot` (the fake jobs). Refuses when STATE/sbatch_refuses exists (its text the error).
  When STATE/sbatch_seconds exists, it waits that long after the job is accepted before printing its id (a
  slow slurmctld reply: the job exists in SLURM while its submitter does not know its id yet).
- `squeue -h -o %i -j IDS`: the jobs with a process left in their session (as SLURM lists a job until
  every process of it is gone; a job accepted pending, when STATE/pending_reason exists, is listed as
  PENDING with that reason by `-o "%i %T %r"` until it is scancelled); `squeue -h -j ID -o %L`: its time left as `M:SS`, from `--time` and its
  start, or STATE/time_left's text when that file exists.
- `scancel IDS`: SIGCONT and SIGTERM to every process of each job, then SIGKILL after `KILL_WAIT_SECONDS`
  (a detached reaper), as slurmd does.

Every call is appended to STATE/calls.log, one JSON list a line.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

FAKE_HOST = Path(__file__).parent / "fake_host.py"
KILL_WAIT_SECONDS = 5.0


def option(args: list[str], name: str) -> str | None:
    for index, arg in enumerate(args):
        if arg.startswith(f"{name}="):
            return arg.split("=", 1)[1]
        if arg == name and index + 1 < len(args):
            return args[index + 1]
    return None


def session(job_pid: int) -> list[int]:
    """The live processes of a job: those in the session its batch process leads (zombies are gone)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            if int(fields[3]) == job_pid and fields[0] != "Z":  # fields: state, ppid, pgrp, session, ...
                found.append(int(entry.name))
    return found


def jobs(state: Path) -> dict[str, dict]:
    return {p.stem: json.loads(p.read_text()) for p in (state / "jobs").glob("*.json")}


def sbatch(state: Path, args: list[str]) -> int:
    refusal = state / "sbatch_refuses"
    if refusal.exists():
        print(refusal.read_text(), file=sys.stderr)
        return 1
    (state / "jobs").mkdir(exist_ok=True)
    job = str(1000 + len(list((state / "jobs").glob("*.json"))))
    command = option(args, "--wrap") or ""
    command = command.replace("-m spica_lib.pilot.node", str(FAKE_HOST) + " pilot")
    output = (option(args, "--output") or os.devnull).replace("%j", job)
    pending = state / "pending_reason"
    if pending.exists():  # accepted, never started
        record = {"pid": None, "pending": pending.read_text().strip(), "minutes": float(option(args, "--time") or 60)}
        (state / "jobs" / f"{job}.json").write_text(json.dumps(record))
        _reply_late(state)
        print(job)
        return 0
    with open(output, "ab") as log:
        process = subprocess.Popen(
            ["/bin/sh", "-c", command], stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            env={**os.environ, "SLURM_JOB_ID": job}, start_new_session=True,
        )  # fmt: skip
    record = {"pid": process.pid, "minutes": float(option(args, "--time") or 60), "started": time.time()}
    (state / "jobs" / f"{job}.json").write_text(json.dumps(record))
    _reply_late(state)
    print(job)
    return 0


def _reply_late(state: Path) -> None:
    delay = state / "sbatch_seconds"
    if delay.exists():
        (state / "sbatch_accepted").touch()
        time.sleep(float(delay.read_text()))


def squeue(state: Path, args: list[str]) -> int:
    known = jobs(state)
    asked = (option(args, "-j") or ",".join(known)).split(",")
    cancelled = {call[1] for call in calls(state) if call[0] == "scancel" and len(call) > 1}
    listed = [job for job in asked if job in known and _listed(known[job], job in cancelled)]
    if not listed and len(asked) == 1:
        print("slurm_load_jobs error: Invalid job id specified", file=sys.stderr)
        return 1
    if option(args, "-o") == "%L":
        override = state / "time_left"
        for job in listed:
            left = known[job]["minutes"] * 60 - (time.time() - known[job]["started"])
            print(override.read_text().strip() if override.exists() else f"{int(left // 60)}:{int(left % 60):02d}")
    elif option(args, "-o") == "%i %T %r":
        for job in listed:
            pending = known[job].get("pending")
            print(f"{job} PENDING {pending}" if pending else f"{job} RUNNING None")
    else:
        print("\n".join(listed))
    return 0


def _listed(record: dict, cancelled: bool) -> bool:
    """A pending job is listed until it is cancelled; a started one while a process of it lives."""
    if record["pid"] is None:
        return not cancelled
    return bool(session(record["pid"]))


def calls(state: Path) -> list[list[str]]:
    path = state / "calls.log"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def scancel(state: Path, args: list[str]) -> int:
    known = jobs(state)
    for job in args:
        if job not in known or known[job]["pid"] is None:
            continue
        for pid in session(known[job]["pid"]):
            for signum in (signal.SIGCONT, signal.SIGTERM):
                with contextlib.suppress(OSError):
                    os.kill(pid, signum)
        subprocess.Popen([sys.executable, __file__, str(state), "reap", job], start_new_session=True,
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    return 0


def reap(state: Path, args: list[str]) -> int:
    time.sleep(KILL_WAIT_SECONDS)
    for pid in session(jobs(state)[args[0]]["pid"]):  # started jobs only: scancel reaps no pending one
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    return 0


def main() -> None:
    state, command, args = Path(sys.argv[1]), sys.argv[2], sys.argv[3:]
    with open(state / "calls.log", "a") as log:
        log.write(json.dumps([command, *args]) + "\n")
    sys.exit({"sbatch": sbatch, "squeue": squeue, "scancel": scancel, "reap": reap}[command](state, args))


if __name__ == "__main__":
    main()
