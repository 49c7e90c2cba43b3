"""Benchmark: several models on one fleet (config/examples/fleet_models.yaml) from scratch, and the split's solve time.

Runs `spica fleet config/examples/fleet_models.yaml --cores 2` in a fresh folder (`--runs` times) and
prints its wall (median), then the plan of the last run from its fleet.json: per model the deployment,
replicas, GPUs by type, capacity, headroom and cost; the inventory left; the binding constraints; the
deployments dropped by the confirming replays; the naive proportional split next to it. Then the
split's own cost: the MILP (HiGHS) solve of the example's candidates, and of a constructed 8 models x
12 candidates on 3 GPU types (median of 5 solves each).

Run: .venv/bin/python bench/fleet_plan.py [--runs N] [--keep DIR]
"""

from __future__ import annotations

import argparse
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from spica_lib.base.artifacts import read_model  # noqa: E402
from spica_lib.fleet.jobs import demands_of  # noqa: E402
from spica_lib.fleet.layout import FleetFiles, FleetRecord  # noqa: E402
from spica_lib.fleet.plan import FleetPlan  # noqa: E402
from spica_lib.fleet.split import SplitCandidate, SplitDemand, solve_split  # noqa: E402

EXAMPLE = REPO / "config" / "examples" / "fleet_models.yaml"


def run_example(folder: Path) -> float:
    start = time.monotonic()
    command = [sys.executable, "-m", "spica_lib.cli", "fleet", str(EXAMPLE), "--cores", "2", "--run", "example"]
    done = subprocess.run(command, cwd=folder, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.exit(f"spica fleet failed ({done.returncode}):\n{done.stderr[-4000:]}")
    return time.monotonic() - start


def gpus(counts: dict[str, int]) -> str:
    return " + ".join(f"{n} x {sku}" for sku, n in counts.items() if n) or "none"


def print_plan(plan: FleetPlan) -> None:
    print(f"goal {plan.goal} on {gpus(plan.inventory)}: {'a plan' if plan.feasible else plan.message}")
    for d in plan.deployments:
        confirmed = f"{d.confirmed.met}/{d.confirmed.samples}" if d.confirmed else "-"
        print(f"  {d.model}: {d.label} x{d.replicas} on {gpus(d.gpus)}; capacity {d.capacity_rps:.3g} req/s for "
              f"{d.offered_rps:.3g} offered, headroom {100 * d.headroom:.0f} % (required {100 * d.required_headroom:.0f} %); "
              f"US$ {d.usd_per_hour:.2f}/h; confirming replays within the SLA {confirmed} ({d.capacity_source})")  # fmt: skip
    if plan.feasible:
        print(f"  total US$ {plan.usd_per_hour:.2f}/h; inventory left {gpus(plan.inventory_left)}; solves {plan.solves}")
    for b in plan.binding:
        print(f"  binding: {b.constraint}: {b.detail}")
    for d in plan.dropped:
        print(f"  dropped: {d.model} {d.key[:12]} x{d.replicas}: {d.why}")
    naive = plan.naive
    if naive is not None:
        for m in naive.models:
            what = "nothing fits" if m.choice is None else f"{m.choice.candidate.label} x{m.choice.replicas}"
            print(f"  naive: {m.model} on {gpus(m.share)}: {what}: {'serves it' if m.meets_sla else 'FAILS'}")
        if naive.fails:
            print(f"  naive split fails {naive.fails}; the plan serves every model")
        elif naive.gpus_saved is not None:
            print(f"  naive: {naive.gpus} GPUs, US$ {naive.usd_per_hour:.2f}/h; saved {naive.gpus_saved} GPUs, "
                  f"US$ {naive.usd_per_hour_saved:.2f}/h")  # fmt: skip


def solve_seconds(demands: list[SplitDemand], inventory: dict[str, int], repeats: int = 5) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        solve_split(demands, inventory, "min_cost")
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def constructed(models: int, candidates: int, seed: int = 0) -> tuple[list[SplitDemand], dict[str, int]]:
    rng = random.Random(seed)
    types = {"b200": 16, "h200": 32, "h100": 64}
    price = {"b200": 6.0, "h200": 3.5, "h100": 2.5}
    demands = []
    for m in range(models):
        cands = []
        for c in range(candidates):
            sku, n = rng.choice(list(types)), rng.choice([1, 2, 4, 8])
            cands.append(SplitCandidate(key=f"{m}-{c}", capacity_rps=rng.uniform(1, 20) * n, gpus={sku: n},
                                        usd_per_hour=price[sku] * n))  # fmt: skip
        demands.append(SplitDemand(name=f"m{m}", offered_rps=rng.uniform(5, 60), headroom=0.2, candidates=cands))
    return demands, types


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--keep", help="run in this folder (kept) instead of a temporary one")
    args = parser.parse_args()
    walls = []
    for index in range(args.runs):
        if args.keep:
            folder = Path(args.keep) / str(index)
            folder.mkdir(parents=True, exist_ok=False)
            walls.append(run_example(folder))
            files = FleetFiles(dir=str(folder / "results" / "example"))
            last = files
        else:
            with tempfile.TemporaryDirectory(prefix="spica-fleet-bench-") as scratch:
                walls.append(run_example(Path(scratch)))
                files = FleetFiles(dir=str(Path(scratch) / "results" / "example"))
                plan = read_model(files.fleet_json, FleetPlan)
                record = read_model(files.record_json, FleetRecord)
                demands, _ = demands_of(record, files)
            last = None
    print(f"example from scratch, {args.runs} run(s): median {statistics.median(walls):.0f} s "
          f"(runs {', '.join(f'{w:.0f}' for w in walls)} s)")  # fmt: skip
    if last is not None:
        plan = read_model(last.fleet_json, FleetPlan)
        record = read_model(last.record_json, FleetRecord)
        demands, _ = demands_of(record, last)
    print_plan(plan)
    print(f"split solve, the example's {sum(len(d.candidates) for d in demands)} candidates: "
          f"{1000 * solve_seconds(demands, record.fleet.inventory):.1f} ms")  # fmt: skip
    big, inventory = constructed(8, 12)
    print(f"split solve, 8 models x 12 candidates on 3 GPU types: {1000 * solve_seconds(big, inventory):.1f} ms")


if __name__ == "__main__":
    main()
