"""Benchmark (a): what the workflow costs around the replays, on the embedded default sweep.

Runs `spica run config/default.yaml --cores 2` from scratch in a scratch folder and reports the
sweep's wall time against the CPU time of its unique replays (each measured in its trial's child
process) and the optimizer's own time (designer build, feeding and suggest, Vizier imports
included). Run: .venv/bin/python bench/sweep_overhead.py [CONFIG]
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def main() -> None:
    config = Path(sys.argv[1] if len(sys.argv) > 1 else REPO / "config" / "default.yaml").resolve()
    with tempfile.TemporaryDirectory() as folder:
        started = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "spica_lib.cli", "run", str(config), "--cores", "2"],
            cwd=folder,
            check=True,
            capture_output=True,
        )
        wall = time.perf_counter() - started
        summary = json.loads(next(Path(folder).glob("results/*/summary.json")).read_text())
    cpu, optimizer = summary["replay_cpu_seconds"], summary["optimizer_seconds"]
    print(
        "| config | unique trials | sweep wall (s) | replay CPU (s) | optimizer (s) | wall / replay CPU | (wall - optimizer) / replay CPU | optimizer share of wall |"
    )
    print("|---|---|---|---|---|---|---|---|")
    print(
        f"| {config.name} | {summary['unique_trials']} | {wall:.1f} | {cpu:.1f} | {optimizer:.1f} | {wall / cpu:.2f} "
        f"| {(wall - optimizer) / cpu:.2f} | {100 * optimizer / wall:.0f} % |"
    )


if __name__ == "__main__":
    main()
