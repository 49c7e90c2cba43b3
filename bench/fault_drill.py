"""Fault drill on the one-node SLURM cluster of .ci/slurm-up.sh: a day-trace sweep survives `scancel`.

The sweep: Qwen3-32B on H200, agg, vLLM, round robin, on the 100k-request day trace of
bench/day_trace.py, 2 rounds x 2 candidates on up to 16 GPUs, goodput per GPU under TTFT 3 s / ITL 60
ms, no baselines or stress test (a trace under round robin has no finish: every replay is exact), `--profile profiles/slurm` as shipped. It runs once
uninterrupted; then again from scratch, and once its first trial is journaled every SLURM job of
the user is cancelled (`scancel --user`); Snakemake notices, and its retries (or, if the sweep
stops, a rerun of the same command) finish the sweep. Printed: wall times, trials finished before
the scancel, how many of those were replayed again (their journal files rewritten), and whether the
ranking (keys and scores) matches the uninterrupted run's.

Run (as root on Debian, the cluster up): .venv/bin/python bench/fault_drill.py
"""

from __future__ import annotations

import getpass
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd
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
                     "baselines": False, "stress_top": 0}  # fmt: skip
    path = folder / "spica.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def ranking(folder: Path) -> list[tuple[str, float]]:
    table = pd.read_csv(next(folder.glob("results/*/ranked.csv")))
    return list(zip(table["key"], table["score"]))


def journal(folder: Path) -> dict[Path, tuple[int, bytes]]:
    return {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in folder.glob("results/*/journal/*.json")}


def main() -> None:
    with tempfile.TemporaryDirectory() as straight_dir, tempfile.TemporaryDirectory() as drill_dir:
        straight, drill = Path(straight_dir), Path(drill_dir)
        started = time.perf_counter()
        subprocess.run([*SPICA, str(config(straight)), "--profile", PROFILE], cwd=straight, check=True,
                       capture_output=True)  # fmt: skip
        straight_wall = time.perf_counter() - started

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
        print("| run | wall (s) | trials | finished before the scancel | replayed again | reruns | same ranking |")
        print("|---|---|---|---|---|---|---|")
        print(f"| uninterrupted | {straight_wall:.0f} | {len(journal(straight))} | | | | |")
        print(f"| scancel of every job at {cancelled_at:.0f} s | {drill_wall:.0f} | {len(after)} | {len(before)} "
              f"| {again} | {reruns} | {'yes' if same else 'no'} |")  # fmt: skip


if __name__ == "__main__":
    main()
