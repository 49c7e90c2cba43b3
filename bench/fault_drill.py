"""Fault drill on the one-node SLURM cluster of .ci/slurm-up.sh: a day-trace sweep survives `scancel`, a
heartbeat write error and a stalled pilot.

The sweep: Qwen3-32B on H200, agg, vLLM, round robin, on the 100k-request day trace of
bench/day_trace.py, 2 rounds x 2 candidates on up to 16 GPUs, goodput per GPU under TTFT 3 s / ITL 60
ms, no baselines, stress test or finish, `--profile profiles/slurm` as shipped. It runs once
uninterrupted; then again from scratch, and once its first trial is journaled every SLURM job of
the user is cancelled (`scancel --user`); Snakemake notices, and its retries (or, if the sweep
stops, a rerun of the same command) finish the sweep. Printed: wall times, trials finished before
the scancel, how many of those were replayed again (their journal files rewritten), and whether the
ranking (keys and scores) matches the uninterrupted run's.

Two more faults, each in a run of its own from scratch, with every journal and trial file watched
(0.2 s) for a second write:

- heartbeat: once the first trial is journaled, the keeper's heartbeat file is replaced by a folder
  for 5 s, so every heartbeat write fails (IsADirectoryError: an injected I/O error, as an ESTALE on
  NFS would be); the keeper must log it and beat on once the file can be written again.
- stalled pilot: once a pilot runs a job, the pilot process is SIGSTOPped (its job runs on) and left
  stopped past the rule script's 30 s wait; the job must be ended (the keeper scancels the pilot)
  before Snakemake retries it in another pilot.

Run (as root on Debian, the cluster up): .venv/bin/python bench/fault_drill.py [--faults scancel,heartbeat,stall]
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd
import psutil
import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))
from day_trace import day_trace  # noqa: E402

from spica_lib.config.narrow import narrowed  # noqa: E402

PROFILE = str(REPO / "profiles" / "slurm")
SPICA = [sys.executable, "-m", "spica_lib.cli", "run"]


def config(folder: Path) -> Path:
    data = yaml.safe_load((REPO / "config" / "default.yaml").read_text())
    data["search_space"] = narrowed({**data["search_space"], "gpu_budget": 16}, deployment_mode=["agg"],
                                    backend=["vllm"], router_mode=["round_robin"],
                                    planner_scaling_policy=["disabled"])  # fmt: skip
    data["workload"] = {"trace_path": str(day_trace(100_000))}
    data["goal"] = {"target": "goodput_per_gpu", "sla": {"ttft_ms": 3000, "itl_ms": 60}}
    data["sweep"] = {"max_rounds": 2, "candidates_per_round": 2, "parallel_evals": 2, "seed": 5,
                     "baselines": False, "stress_top": 0,
                     # No finish: its one job replays the top on up to 16 bootstrap samples each, and the SLURM
                     # limit that asks for (waves x max_eval_seconds) exceeds the one-node cluster's 120-minute
                     # partitions, so its pilot would never start. The drill is about the search's trials.
                     "finish_samples": 0,
                     # A trial of this trace takes about a minute here; the size-derived limit is hours.
                     "max_eval_seconds": 600}  # fmt: skip
    path = folder / "spica.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def ranking(folder: Path) -> list[tuple[str, float]]:
    table = pd.read_csv(next(folder.glob("results/*/ranked.csv")))
    return list(zip(table["key"], table["score"]))


def journal(folder: Path) -> dict[Path, tuple[int, bytes]]:
    return {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in folder.glob("results/*/journal/*.json")}


class Watch:
    """Every journal and trial file of a run, and how often one was written again after its first write."""

    def __init__(self, folder: Path):
        self.folder, self.seen, self.rewritten = folder, {}, set()

    def look(self) -> None:
        for path in [*self.folder.glob("results/*/journal/*.json"),
                     *self.folder.glob("results/*/rounds/*/*/trials/*/*.json")]:  # fmt: skip
            try:
                status = path.stat()
            except OSError:
                continue
            key = (status.st_ino, status.st_mtime_ns, status.st_size)
            if path in self.seen and self.seen[path] != key:
                self.rewritten.add(path)
            self.seen[path] = key

    def sleep(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self.look()
            time.sleep(0.2)


def spools(folder: Path) -> list[Path]:
    return list(folder.glob("results/*/.pilot/*"))


def break_heartbeat(folder: Path, watch: Watch, seconds: float = 5.0) -> str:
    """The keeper's heartbeat file becomes a folder for `seconds`: each of its writes fails meanwhile."""
    (spool,) = spools(folder)
    heartbeat = spool / "heartbeat"
    while True:
        heartbeat.unlink(missing_ok=True)
        try:
            heartbeat.mkdir()
            break
        except FileExistsError:  # the keeper wrote it again in between
            continue
    watch.sleep(seconds)
    heartbeat.rmdir()
    before = heartbeat.stat().st_mtime if heartbeat.exists() else None
    watch.sleep(3.0)
    beats_on = heartbeat.is_file() and heartbeat.stat().st_mtime != before
    return f"the keeper beats on after it: {'yes' if beats_on else 'NO'}"


def running_pilot(folder: Path) -> tuple[str, psutil.Process] | None:
    """A pilot that runs a job (its beat says so), and its process."""
    for spool in spools(folder):
        for beat_file in (spool / "pilots").glob("*.json"):
            try:
                beat = json.loads(beat_file.read_text())
            except (OSError, ValueError):
                continue
            if not beat.get("running") or beat.get("gone"):
                continue
            for process in psutil.process_iter(["cmdline"]):
                try:
                    if "spica_lib.pilot.node" in " ".join(process.info["cmdline"] or []) and \
                            process.environ().get("SLURM_JOB_ID") == beat["pilot"]:  # fmt: skip
                        return beat["pilot"], process
                except psutil.Error:
                    continue
    return None


def stall_pilot(folder: Path, watch: Watch, process_alive) -> str:
    """SIGSTOP a pilot that runs a job and leave it stopped: its rule script's wait (30 s) must end it."""
    found = None
    while found is None and process_alive():
        found = running_pilot(folder)
        watch.sleep(0.5)
    if found is None:
        return "no pilot ran a job to stop"
    job, pilot = found
    children = pilot.children(recursive=True)  # the job and its replays: they run on while the pilot is stopped
    pilot.send_signal(signal.SIGSTOP)
    stopped = time.perf_counter()
    while time.perf_counter() - stopped < 300 and (_alive(pilot) or any(_alive(c) for c in children)):
        watch.sleep(0.5)
    ended = time.perf_counter() - stopped
    return f"pilot job {job} stopped; it and its job were ended {ended:.0f} s later"


def _alive(process: psutil.Process) -> bool:
    try:
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def faulted_run(folder: Path, fault: str) -> tuple[float, str, Watch, str]:
    """One run from scratch with `fault` injected once its first trial is journaled (heartbeat) or a pilot runs
    a job (stall); it must finish by itself (Snakemake's retries, no rerun)."""
    path = config(folder)
    watch = Watch(folder)
    started = time.perf_counter()
    with open(folder / "sweep.log", "w") as log:
        process = subprocess.Popen([*SPICA, str(path), "--profile", PROFILE], cwd=folder, stdout=log,
                                   stderr=subprocess.STDOUT)  # fmt: skip
        while not journal(folder) and process.poll() is None and fault == "heartbeat":
            watch.sleep(0.5)
        at = time.perf_counter() - started
        if fault == "heartbeat":
            outcome = break_heartbeat(folder, watch)
        else:
            outcome = stall_pilot(folder, watch, lambda: process.poll() is None)
            at = time.perf_counter() - started
        while process.poll() is None:
            watch.sleep(0.5)
        watch.look()
    wall = time.perf_counter() - started
    text = (folder / "sweep.log").read_text(errors="replace")
    errors = text.count("spica keeper: beat:")
    if fault == "heartbeat":
        outcome += f"; heartbeat write errors logged: {errors}"
    status = "ok" if process.returncode == 0 else f"FAILED (exit {process.returncode})"
    return wall, f"{outcome}; sweep {status}", watch, f"{at:.0f}"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--faults", default="scancel,heartbeat,stall")
    faults = parser.parse_args().faults.split(",")
    with tempfile.TemporaryDirectory() as straight_dir:
        straight = Path(straight_dir)
        started = time.perf_counter()
        done = subprocess.run([*SPICA, str(config(straight)), "--profile", PROFILE], cwd=straight,
                              capture_output=True, text=True)  # fmt: skip
        if done.returncode != 0:
            sys.exit(f"the uninterrupted sweep failed (exit {done.returncode}):\n{done.stderr[-4000:]}")
        straight_wall = time.perf_counter() - started
        print("| run | wall (s) | trials | finished before the scancel | replayed again | reruns | same ranking |")
        print("|---|---|---|---|---|---|---|")
        print(f"| uninterrupted | {straight_wall:.0f} | {len(journal(straight))} | | | | |", flush=True)
        if "scancel" in faults:
            with tempfile.TemporaryDirectory() as drill_dir:
                scancel_drill(straight, Path(drill_dir))
        if set(faults) - {"scancel"}:
            print("\n| run | wall (s) | trials | written twice | what happened | same ranking |")
            print("|---|---|---|---|---|---|")
        for fault in [f for f in faults if f != "scancel"]:
            with tempfile.TemporaryDirectory() as drill_dir:
                drill = Path(drill_dir)
                wall, outcome, watch, at = faulted_run(drill, fault)
                same = ranking(straight) == ranking(drill)
                what = {"heartbeat": f"heartbeat write error for 5 s at {at} s",
                        "stall": f"pilot SIGSTOPped at {at} s"}[fault]  # fmt: skip
                print(f"| {what} | {wall:.0f} | {len(journal(drill))} | "
                      f"{len(watch.rewritten)} | {outcome} | {'yes' if same else 'no'} |", flush=True)  # fmt: skip


def scancel_drill(straight: Path, drill: Path) -> None:
    path = config(drill)
    started = time.perf_counter()
    process = subprocess.Popen([*SPICA, str(path), "--profile", PROFILE], cwd=drill,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    while not journal(drill) and process.poll() is None:
        time.sleep(1)
    before = journal(drill)
    subprocess.run(["scancel", "--user", getpass.getuser()], check=True)
    cancelled_at = time.perf_counter() - started
    reruns = 0
    while process.wait() != 0 and reruns < 2:  # the sweep stopped: resume it with the same command
        reruns += 1
        process = subprocess.Popen([*SPICA, str(path), "--profile", PROFILE], cwd=drill,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    drill_wall = time.perf_counter() - started
    after = journal(drill)
    again = sum(after.get(p) != kept for p, kept in before.items())
    same = ranking(straight) == ranking(drill)
    print(f"| scancel of every job at {cancelled_at:.0f} s | {drill_wall:.0f} | {len(after)} | {len(before)} "
          f"| {again} | {reruns} | {'yes' if same else 'no'} |", flush=True)  # fmt: skip


if __name__ == "__main__":
    os.environ.pop("SLURM_JOB_ID", None)
    main()
