"""Benchmark (c): what SLURM costs per trial, with and without grouping, on the one-node cluster.

Runs one sweep (the embedded default, round robin only, 2 rounds x 4 candidates per branch) from
scratch three ways: locally (`--cores 2`), on SLURM with `profiles/slurm` as shipped but one trial per
SLURM job (group size 1), and on SLURM with 4 trials per job. Reports wall time, SLURM jobs submitted,
and the overhead per trial against the local run. Needs the cluster of .ci/slurm-up.sh.
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

REPO = Path(__file__).resolve().parents[1]
PROFILE = str(REPO / "profiles" / "slurm")
SPICA = [sys.executable, "-m", "spica_lib.cli", "run"]


def sweep(folder: Path) -> Path:
    data = yaml.safe_load((REPO / "config" / "default.yaml").read_text())
    data["search_space"]["router_mode"] = ["round_robin"]
    data["sweep"].update(max_rounds=2, candidates_per_round=4, parallel_evals=4, seed=3)
    path = folder / "spica.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def timed(folder: Path, config: Path, extra: list[str]) -> tuple[float, int, int]:
    started = time.perf_counter()
    done = subprocess.run([*SPICA, str(config), *extra], cwd=folder, capture_output=True, text=True, check=True)
    wall = time.perf_counter() - started
    jobs = len(set(re.findall(r"submitted with SLURM jobid (\d+)", done.stdout + done.stderr)))
    summary = json.loads(next(folder.glob("results/*/summary.json")).read_text())
    return wall, summary["unique_trials"], jobs


def main() -> None:
    ways = {
        "local, --cores 2": ["--cores", "2"],
        "SLURM, 1 trial per job": ["--profile", PROFILE, "--", "--group-components", "trials_{branch}_r{round}=1"],
        "SLURM, 4 trials per job (shipped profile)": ["--profile", PROFILE],
    }
    rows = []
    for name, extra in ways.items():
        with tempfile.TemporaryDirectory() as scratch:
            folder = Path(scratch)
            rows.append((name, *timed(folder, sweep(folder), extra)))
    local_wall = rows[0][1]
    print("| run | trials | SLURM jobs | wall (s) | extra wall per trial vs local (s) |")
    print("|---|---|---|---|---|")
    for name, wall, trials, jobs in rows:
        print(f"| {name} | {trials} | {jobs} | {wall:.0f} | {(wall - local_wall) / trials:.1f} |")


if __name__ == "__main__":
    main()
