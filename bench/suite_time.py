"""Benchmark: how long CI's test suite takes, and where the time goes (issue 40: under 20 minutes).

Each run is CI's own: a fresh clone of the commit checked out here, in a temporary folder, and its
`.ci/run` (a new virtual environment from the lock, the one-node SLURM cluster when this is a root
shell on Debian, then `make test`), with pytest's `--durations` added through PYTEST_ADDOPTS. The
figure is pytest's own "in N s" for the tests (the install before them is printed apart), the median
of `--runs` runs (3 by default); then the ten slowest tests, each by its median over the runs.

Run: .venv/bin/python bench/suite_time.py [--runs N]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SLOWEST = 10
DURATION = re.compile(r"^([\d.]+)s (call|setup|teardown) +(.+)$", re.MULTILINE)
TOTAL = re.compile(r"^=+ (.*(?:passed|failed).*) in ([\d.]+)s", re.MULTILINE)  # pytest's last line


def one_run(commit: str) -> tuple[float, float, int, int, dict[str, float]]:
    """(wall of .ci/run, seconds of tests, passed, failed, seconds per test phase) of one fresh clone."""
    with tempfile.TemporaryDirectory(prefix="spica-suite-") as folder:
        clone = Path(folder) / "spica"
        subprocess.run(["git", "clone", "--quiet", str(REPO), str(clone)], check=True)
        subprocess.run(["git", "checkout", "--quiet", commit], cwd=clone, check=True)
        started = time.perf_counter()
        # Its own session, so that a stop of this script (Ctrl-C, SIGTERM) takes the whole suite with it.
        ci = subprocess.Popen([str(clone / ".ci" / "run")], cwd=clone, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, start_new_session=True,
                              env={**os.environ, "PYTEST_ADDOPTS": "--durations=40"})  # fmt: skip
        try:
            stdout, _ = ci.communicate()
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(ci.pid, signal.SIGKILL)
        wall = time.perf_counter() - started
    found = TOTAL.findall(stdout)
    if not found:
        raise SystemExit(f"no pytest total in the output (exit {ci.returncode}):\n{stdout[-3000:]}")
    counts, seconds = found[-1][0], float(found[-1][1])
    passed, failed = (int(m.group(1)) if (m := re.search(rf"(\d+) {word}", counts)) else 0
                      for word in ("passed", "failed"))  # fmt: skip
    phases = {f"{test} ({phase})": float(s) for s, phase, test in DURATION.findall(stdout)}
    if failed:  # a timing of a red suite is no figure: say what failed, with pytest's own summary of it
        print(stdout[stdout.find("= FAILURES ="):][-20000:], flush=True)
    return wall, seconds, passed, failed, phases


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    runs = parser.parse_args().runs
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))  # so one_run's `finally` runs
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True,
                            check=True).stdout.strip()  # fmt: skip
    results = []
    for index in range(runs):
        wall, seconds, passed, failed, phases = one_run(commit)
        results.append((wall, seconds, phases))
        print(f"run {index + 1}: {passed} passed, {failed} failed; tests {seconds / 60:.1f} min "
              f"({seconds:.0f} s); .ci/run in all {wall / 60:.1f} min", flush=True)  # fmt: skip
    tests = statistics.median(seconds for _, seconds, _ in results)
    walls = statistics.median(wall for wall, _, _ in results)
    print(f"\ncommit {commit[:7]}: tests {tests / 60:.1f} min ({tests:.0f} s), median of {runs}; "
          f".ci/run in all {walls / 60:.1f} min; runs: " + ", ".join(f"{s:.0f} s" for _, s, _ in results))  # fmt: skip
    names = {name for _, _, phases in results for name in phases}
    medians = {name: statistics.median(phases.get(name, 0.0) for _, _, phases in results) for name in names}
    print(f"\n| the {SLOWEST} slowest (median of {runs}) | s |\n|---|---:|")
    for name, value in sorted(medians.items(), key=lambda item: -item[1])[:SLOWEST]:
        print(f"| `{name}` | {value:.1f} |")


if __name__ == "__main__":
    main()
