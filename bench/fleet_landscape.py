"""Benchmark: the search on a two-GPU-type landscape — does the default algorithm find the cheapest deployment?

The landscape is the fleet example's question (config/examples/fleet.yaml, narrowed to one engine
setting per role so it can be replayed whole): Qwen3-32B on an inventory of 4 H200 and 16 H100 (US$
3.5 and 2.5 per GPU-hour), vLLM, round robin, no planner, ISL 2048 / OSL 256 at 8 req/s, the cheapest
cost per million output tokens with 99 % of requests within TTFT 2 s and ITL 50 ms. Every layout of both
branches (agg on either type; disagg with the prefill and the decode type chosen independently) is
replayed through the sweep's own trial path, cached on disk under a key of the landscape's config,
Spica's source and the Dynamo / aiconfigurator versions (bench/search_efficiency.py's cache).
The default algorithm with the default warm start then searches each branch through the real round
logic at 32 evaluations (8 rounds x 4), 10 seeds. Printed: per branch and overall, each seed's share
of the best (the best cost over the cost found: 1 is the optimum), their median and worst; the
optimum and whether it mixes GPU types across roles; how many of the 10 cheapest deployments mix
them; how often the search's pick mixes them; and the cheapest deployment on one GPU type only.

Run: .venv/bin/python bench/fleet_landscape.py [--seeds N] [--rounds R]
"""

from __future__ import annotations

import argparse
import statistics
import time

from search_efficiency import landscape_table, search_in_child

from spica_lib.config import SmartSearchConfig
from spica_lib.facts.parallel import role_configs
from spica_lib.pools.branches import enumerate_branches
from spica_lib.search.space import BranchSpace
from spica_lib.search.warm_start import seed_parameters
from spica_lib.trial.describe import describe
from spica_lib.trial.evaluate import prepare_trial

INVENTORY = {"h200_sxm": 4, "h100_sxm": 16}
PRICES = {"h200_sxm": 3.5, "h100_sxm": 2.5}


def config_for(seed: int, rounds: int) -> SmartSearchConfig:
    return SmartSearchConfig.from_mapping(
        {
            "search_space": {
                "model_name": "Qwen/Qwen3-32B",
                "hardware": INVENTORY,
                "deployment_mode": ["agg", "disagg"],
                "backend": ["vllm"],
                "agg_max_num_batched_tokens": [8192],
                "agg_max_num_seqs": [256],
                "prefill_max_num_batched_tokens": [8192],
                "prefill_max_num_seqs": [8],
                "decode_max_num_seqs": [256],
                "router_mode": ["round_robin"],
                "planner_scaling_policy": ["disabled"],
            },
            "workload": {"isl": 2048, "osl": 256, "request_rate": 8.0, "num_request_ratio": 30},
            "goal": {
                "target": "cost_per_million_output_tokens",
                "gpu_hour_usd": PRICES,
                "sla": {"ttft_ms": 2000, "itl_ms": 50},
                "sla_coverage": 0.99,
            },
            "sweep": {"seed": seed, "candidates_per_round": 4, "max_rounds": rounds, "parallel_evals": 2},
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
    args = parser.parse_args()
    base = config_for(0, args.rounds)
    costs, labels, found = {}, {}, {}
    for branch in enumerate_branches(base):
        mode = branch.spec.deployment_mode
        clock = time.perf_counter()
        table = landscape_table(base, branch)
        roles = skus(base, branch)
        feasible = {k: -r.score for k, r in table.items() if r.status == "feasible"}
        costs.update(feasible)
        labels.update({k: roles[k] for k in feasible})
        best = min(feasible.values())
        print(
            f"\n## {mode}: {len(table)} distinct trials ({branch.spec.pool_size} layouts), {len(feasible)} feasible, "
            f"best US$ {best:.3f}/1M tok ({time.perf_counter() - clock:.0f} s to replay or load)",
            flush=True,
        )
        shares, picks = [], []
        for seed in range(args.seeds):
            score = search_in_child(config_for(seed, args.rounds), branch, table)
            cost = -score if score < 0 else float("inf")
            shares.append(best / cost)
            picks.append(next((k for k, c in feasible.items() if c == cost), None))
        found[mode] = (shares, picks)
        per_seed = " ".join(f"{100 * s:.1f}" for s in shares)
        print(f"{args.rounds * 4} evals: {per_seed}; median {100 * statistics.median(shares):.1f} %, "
              f"worst {100 * min(shares):.1f} %")  # fmt: skip
    best_key = min(costs, key=costs.get)
    best = costs[best_key]
    overall = [best / min(best / found[m][0][seed] for m in found) for seed in range(args.seeds)]
    mixed = [k for k in costs if len(set(labels[k][0])) > 1]
    cheapest = sorted(costs, key=costs.get)[:10]
    picks = [min((found[m][1][seed] for m in found if found[m][1][seed]), key=costs.get, default=None)
             for seed in range(args.seeds)]  # fmt: skip
    print("\n## Overall (the cheaper of each seed's two branch picks)")
    print(f"shares of the best: {' '.join(f'{100 * s:.1f}' for s in overall)}; median "
          f"{100 * statistics.median(overall):.1f} %, worst {100 * min(overall):.1f} %")  # fmt: skip
    print(f"optimum: {labels[best_key][1]} at US$ {best:.3f}/1M tok; mixes GPU types: "
          f"{'yes' if best_key in mixed else 'no'}")  # fmt: skip
    print(f"of the 10 cheapest feasible deployments, {sum(k in mixed for k in cheapest)} mix GPU types; "
          f"of all {len(costs)} feasible, {len(mixed)}")  # fmt: skip
    print(f"the search's pick mixes GPU types in {sum(p in mixed for p in picks if p)} of {args.seeds} seeds")
    for sku in INVENTORY:
        only = [k for k in costs if set(labels[k][0]) == {sku}]
        if only:
            k = min(only, key=costs.get)
            print(f"cheapest on {sku} alone: {labels[k][1]} at US$ {costs[k]:.3f}/1M tok "
                  f"({100 * (costs[k] / best - 1):.1f} % above the optimum)")  # fmt: skip


if __name__ == "__main__":
    main()
