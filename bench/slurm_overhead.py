"""Benchmark (c): what SLURM costs per trial, on the one-node cluster of .ci/slurm-up.sh.

Runs one sweep (the embedded default, round robin only, 2 rounds x 4 candidates per branch) from
scratch three ways, three times each: locally (`--cores 2`); on SLURM with `profiles/slurm` as
shipped (pilot jobs run the replay jobs, 4 trials each, 2 at once); and on SLURM with the pilots
off (every replay job its own SLURM job, as before the pilots). Reports the median wall time, SLURM
jobs submitted (pilots included), and the extra wall per trial against the local run.
Run: .venv/bin/python bench/slurm_overhead.py
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from spica_lib.config.narrow import narrowed

REPO = Path(__file__).resolve().parents[1]
PROFILE = str(REPO / "profiles" / "slurm")
SPICA = [sys.executable, "-m", "spica_lib.cli", "run"]
RUNS = 3


def sweep(folder: Path) -> Path:
    data = yaml.safe_load((REPO / "config" / "default.yaml").read_text())
    data["search_space"] = narrowed(data["search_space"], router_mode=["round_robin"])
    data["sweep"].update(max_rounds=2, candidates_per_round=4, parallel_evals=4, seed=3)
    path = folder / "spica.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def timed(folder: Path, config: Path, extra: list[str]) -> tuple[float, int, int]:
    started = time.perf_counter()
    done = subprocess.run([*SPICA, str(config), *extra], cwd=folder, capture_output=True, text=True, check=True)
    wall = time.perf_counter() - started
    output = done.stdout + done.stderr
    jobs = len(set(re.findall(r"(?:submitted with SLURM jobid|submitted pilot job) (\d+)", output)))
    summary = json.loads(next(folder.glob("results/*/summary.json")).read_text())
    return wall, summary["unique_trials"], jobs


def main() -> None:
    ways = {
        "local, --cores 2": ["--cores", "2"],
        "SLURM, shipped profile (pilots; 4 trials per replay job)": ["--profile", PROFILE],
        "SLURM, pilots off (--set-resources replay:trials_per_job=4)": ["--profile", PROFILE, "--", "--set-resources", "replay:trials_per_job=4"],
    }
    rows = []
    for name, extra in ways.items():
        runs = []
        for _ in range(RUNS):
            with tempfile.TemporaryDirectory() as scratch:
                folder = Path(scratch)
                runs.append(timed(folder, sweep(folder), extra))
        runs.sort()
        rows.append((name, runs[len(runs) // 2], [r[0] for r in runs]))
    local_wall = rows[0][1][0]
    print("| run | trials | SLURM jobs | wall, median of 3 (s) | runs (s) | extra wall per trial vs local (s) |")
    print("|---|---|---|---|---|---|")
    for name, (wall, trials, jobs), walls in rows:
        runs = ", ".join(f"{w:.0f}" for w in walls)
        print(f"| {name} | {trials} | {jobs} | {wall:.0f} | {runs} | {(wall - local_wall) / trials:.1f} |")


if __name__ == "__main__":
    main()
