"""Benchmark: the search on a two-GPU-type landscape — does the default algorithm find the cheapest deployment?

Two landscapes, each the cheapest cost per million output tokens of Qwen3-32B (vLLM, round robin, no planner,
one engine setting per role so that it can be replayed whole) with 99 % of requests within TTFT 2 s and
ITL 50 ms:
  fleet  the fleet example's question (config/examples/fleet.yaml): 4 H200 and 16 H100 (US$ 3.5 and 2.5 per
         GPU-hour), ISL 2048 / OSL 256 at 8 req/s;
  heavy  8 B200 and 16 H100 (US$ 6.0 and 2.5), ISL 4096 / OSL 512 at 12 req/s.
Every layout of both branches (agg on either type; disagg with the prefill and the decode type chosen
independently) is replayed through the sweep's own trial path, cached on disk under a key of the landscape's config,
the source a replay depends on and the Dynamo / aiconfigurator versions (bench/search_efficiency.py's cache).
The default algorithm then searches each branch through the real round logic at 32 evaluations (8 rounds
x 4), 10 seeds, with the warm start (the default) and without it (the designer alone), each round waiting
for the one before and with 2 rounds in flight (sweep.rounds_in_flight, ordered as a sweep orders them).
Printed: per branch and overall, each seed's share of the best (the best cost over the cost found: 1 is the optimum),
their median and worst; the optimum and whether it mixes GPU types across roles; how many of the 10
cheapest deployments mix them; how often the search's pick mixes them; and the cheapest deployment on one
GPU type only. First, the fleet example itself from scratch (`spica run config/examples/fleet.yaml
--cores 2`, 3 times): its wall (median) and its answer.

Run: .venv/bin/python bench/fleet_landscape.py [--seeds N] [--rounds R] [--landscapes fleet,heavy|none]
     [--example-runs N] [--in-flight 1,2]
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import time
from pathlib import Path

import yaml
from search_efficiency import landscape_table, search_in_child
from timed_sweep import timed_sweep

from spica_lib.config import SmartSearchConfig
from spica_lib.facts.parallel import role_configs
from spica_lib.pools.branches import enumerate_branches
from spica_lib.search.space import BranchSpace
from spica_lib.search.warm_start import seed_parameters
from spica_lib.trial.describe import describe
from spica_lib.trial.evaluate import prepare_trial

REPO = Path(__file__).resolve().parents[1]
# name -> (inventory, US$ per GPU-hour, workload): the fleet example's question, and a heavier one on other types.
LANDSCAPES = {
    "fleet": (
        {"h200_sxm": 4, "h100_sxm": 16},
        {"h200_sxm": 3.5, "h100_sxm": 2.5},
        {"isl": 2048, "osl": 256, "request_rate": 8.0, "num_request_ratio": 30},
    ),
    "heavy": (
        {"b200_sxm": 8, "h100_sxm": 16},
        {"b200_sxm": 6.0, "h100_sxm": 2.5},
        {"isl": 4096, "osl": 512, "request_rate": 12.0, "num_request_ratio": 25},
    ),
}
ENGINES = {  # one engine setting per role, so that the whole landscape can be replayed
    "agg": {"agg_max_num_batched_tokens": [8192], "agg_max_num_seqs": [256]},
    "disagg": {"prefill_max_num_batched_tokens": [8192], "prefill_max_num_seqs": [8], "decode_max_num_seqs": [256]},
}


def config_for(
    landscape: str, mode: str, seed: int, rounds: int, warm: bool = True, in_flight: int = 1
) -> SmartSearchConfig:
    """One branch's config (one mode each: the landscape cache is keyed by the config)."""
    inventory, prices, workload = LANDSCAPES[landscape]
    return SmartSearchConfig.from_mapping(
        {
            "search_space": {
                "model_name": "Qwen/Qwen3-32B",
                "hardware": inventory,
                "deployment_mode": [mode],
                "backend": ["vllm"],
                **ENGINES[mode],
                "router_mode": ["round_robin"],
                "planner_scaling_policy": ["disabled"],
            },
            "workload": workload,
            "goal": {
                "target": "cost_per_million_output_tokens",
                "gpu_hour_usd": prices,
                "sla": {"ttft_ms": 2000, "itl_ms": 50},
                "sla_coverage": 0.99,
            },
            "sweep": {
                "seed": seed,
                "candidates_per_round": 4,
                "max_rounds": rounds,
                "parallel_evals": 2,
                "warm_start": warm,
                "rounds_in_flight": in_flight,
            },
        }
    )


def skus(config: SmartSearchConfig, branch) -> dict[str, tuple[tuple[str, ...], str]]:
    """Trial key -> (the GPU types of its roles: prefill, decode, or agg's one; its description)."""
    space = BranchSpace(branch.spec, branch.pool)
    out = {}
    for record in branch.pool:
        selection = space.decode(seed_parameters(space, record.config, "vllm"))
        version = branch.spec.backend_versions["vllm"]
        spec = prepare_trial(config, selection.values, selection.parallel_config, backend_version=version)
        out[spec.key()] = (tuple(r.sku for r in role_configs(record.config).values()), describe(spec))
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--landscapes", default=",".join(LANDSCAPES), help="comma-separated, or none")
    parser.add_argument("--example-runs", type=int, default=3, help="times config/examples/fleet.yaml from scratch")
    parser.add_argument("--in-flight", default="1,2", help="sweep.rounds_in_flight values (1: each round waits)")
    args = parser.parse_args()
    windows = [int(w) for w in args.in_flight.split(",")]
    if args.example_runs:
        time_example(args.example_runs)
    rows = []
    for landscape in [name for name in args.landscapes.split(",") if name in LANDSCAPES]:
        rows += measure(landscape, args.seeds, args.rounds, windows)
    if not rows:
        return
    print("\n| landscape | branch | warm start | rounds in flight | median share of the best | worst seed |")
    print("|---|---|---|---|---|---|")
    for landscape, branch, warm, window, median, worst in rows:
        print(f"| {landscape} | {branch} | {'on' if warm else 'off'} | {window} | {100 * median:.1f} % "
              f"| {100 * worst:.1f} % |")  # fmt: skip


def time_example(runs: int) -> None:
    """`spica run config/examples/fleet.yaml --cores 2` from scratch, `runs` times: its wall and its answer."""
    data = yaml.safe_load((REPO / "config" / "examples" / "fleet.yaml").read_text())
    walls = []
    for _ in range(runs):
        wall, (line, capacity) = timed_sweep(data, 2, _summary_and_capacity)
        walls.append(wall)
    print(f"## config/examples/fleet.yaml, --cores 2: wall {statistics.median(walls):.0f} s (median of {runs}: "
          f"{', '.join(f'{w:.0f}' for w in walls)} s)")  # fmt: skip
    print(line)
    print(f"capacity.json: {capacity}", flush=True)


def _summary_and_capacity(run: Path) -> tuple[str, str]:
    summary = json.loads((run / "summary.json").read_text())
    capacity = json.loads((run / "capacity.json").read_text())
    points = [
        f"#{i + 1} up to {d['capacity_factor']:.3g}x (misses at {d['broke_at_factor'] or float('nan'):.3g}x)"
        for i, d in enumerate(capacity["deployments"])
    ]
    return summary["line"], "; ".join(points)


def measure(
    landscape: str, seeds: int, rounds: int, windows: list[int]
) -> list[tuple[str, str, bool, int, float, float]]:
    inventory = LANDSCAPES[landscape][0]
    costs, labels, found, rows, branch_best = {}, {}, {}, [], {}
    for mode in ("agg", "disagg"):
        base = config_for(landscape, mode, 0, rounds)
        branch = enumerate_branches(base)[0]
        clock = time.perf_counter()
        table = landscape_table(base, branch)
        roles = skus(base, branch)
        feasible = {k: -r.score for k, r in table.items() if r.status == "feasible"}
        costs.update(feasible)
        labels.update({k: roles[k] for k in feasible})
        best = branch_best[mode] = min(feasible.values())
        print(
            f"\n## {landscape} {mode}: {len(table)} distinct trials ({branch.spec.pool_size} layouts), "
            f"{len(feasible)} feasible, best US$ {best:.3f}/1M tok "
            f"({time.perf_counter() - clock:.0f} s to replay or load)",
            flush=True,
        )
        for window, warm in itertools.product(windows, (True, False)):
            shares, picks = [], []
            for seed in range(seeds):
                score = search_in_child(config_for(landscape, mode, seed, rounds, warm, window), branch, table)
                cost = -score if score < 0 else float("inf")
                shares.append(best / cost)
                picks.append(next((k for k, c in feasible.items() if c == cost), None))
            if warm:
                found[(mode, window)] = (shares, picks)
            rows.append((landscape, mode, warm, window, statistics.median(shares), min(shares)))
            print(f"{rounds * 4} evals, warm start {'on' if warm else 'off'}, {window} round(s) in flight: "
                  f"{' '.join(f'{100 * s:.1f}' for s in shares)}; median {100 * statistics.median(shares):.1f} %, "
                  f"worst {100 * min(shares):.1f} %", flush=True)  # fmt: skip
    best_key = min(costs, key=costs.get)
    best = costs[best_key]
    mixed = {k for k in costs if len(set(labels[k][0])) > 1}
    cheapest = sorted(costs, key=costs.get)[:10]
    print(f"\n## {landscape}: optimum {labels[best_key][1]} at US$ {best:.3f}/1M tok; mixes GPU types: "
          f"{'yes' if best_key in mixed else 'no'}")  # fmt: skip
    print(f"of the 10 cheapest feasible deployments, {sum(k in mixed for k in cheapest)} mix GPU types; "
          f"of all {len(costs)} feasible, {len(mixed)}")  # fmt: skip
    for window in windows:
        # Each seed's cost found in a branch is that branch's best over its share; the answer is the cheaper branch's.
        modes = [m for m in branch_best if (m, window) in found]
        overall = [best / min(branch_best[m] / found[(m, window)][0][seed] for m in modes) for seed in range(seeds)]
        rows.append((landscape, "both (the cheaper pick)", True, window, statistics.median(overall), min(overall)))
        picks = [min((found[(m, window)][1][seed] for m in modes if found[(m, window)][1][seed]), key=costs.get,
                     default=None) for seed in range(seeds)]  # fmt: skip
        print(f"both branches, default settings, {window} round(s) in flight (the cheaper of each seed's two picks): "
              f"shares of the best {' '.join(f'{100 * s:.1f}' for s in overall)}; median "
              f"{100 * statistics.median(overall):.1f} %, worst {100 * min(overall):.1f} %; the pick mixes GPU types "
              f"in {sum(p in mixed for p in picks if p)} of {seeds} seeds")  # fmt: skip
        for mode in modes:
            short = [seed for seed, share in enumerate(found[(mode, window)][0]) if share < 0.99]
            if short:
                print(f"{mode}: seeds {short} missed the branch's best")
    for sku in inventory:
        only = [k for k in costs if set(labels[k][0]) == {sku}]
        if only:
            k = min(only, key=costs.get)
            print(f"cheapest on {sku} alone: {labels[k][1]} at US$ {costs[k]:.3f}/1M tok "
                  f"({100 * (costs[k] / best - 1):.1f} % above the optimum)")  # fmt: skip
    return rows


if __name__ == "__main__":
    main()
