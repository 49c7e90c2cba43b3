"""Benchmark (b): how quickly each algorithm finds the best configuration of a small branch.

The branch (Qwen3-32B on up to 8 H200, agg, vLLM + SGLang, 3 batched-token x 3 max-seq values,
ISL 4096 / OSL 512 at 16 req/s so the knobs matter: 3 of 270 configurations are within 1 % of the best,
round robin, no planner) has 270 configurations. All are replayed once, in this warm process, to
get the grid's best score; then each algorithm searches it through the real round logic
(`suggest_round` / `tell_round`, Vizier as in a sweep) with replays looked up in that table, for
15 % of the grid (5 rounds x 8). Reported: the share of the grid's best reached, median of 5 seeds,
and the optimizer's time per round.
Run: .venv/bin/python bench/search_efficiency.py [ALGORITHM ...]
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("DYN_LOG", "error")

from spica_lib.config import SmartSearchConfig  # noqa: E402
from spica_lib.facts.kv_capacity import KvEstimator  # noqa: E402
from spica_lib.pools.branches import enumerate_branches  # noqa: E402
from spica_lib.replay.request import run_replay  # noqa: E402
from spica_lib.search.rounds import SearchContext, suggest_round, tell_round  # noqa: E402
from spica_lib.trial.evaluate import prepare_trial  # noqa: E402
from spica_lib.trial.score import average_gpus, make_candidate  # noqa: E402
from spica_lib.trial.spec import TrialRecord, TrialResult  # noqa: E402

ALGORITHMS = ["eagle", "gp_ucb_pe", "gp_bandit", "nsga2", "quasi_random", "random"]
SEEDS = [0, 1, 2, 3, 4]
ROUNDS, PER_ROUND = 5, 8
CACHE = Path(os.environ.get("SPICA_BENCH_CACHE", "/tmp/spica_grid.json"))


def config_for(algorithm: str, seed: int) -> SmartSearchConfig:
    return SmartSearchConfig.from_mapping(
        {
            "search_space": {
                "model_name": "Qwen/Qwen3-32B",
                "hardware_sku": "h200_sxm",
                "gpu_budget": 8,
                "deployment_mode": ["agg"],
                "backend": ["vllm", "sglang"],
                "agg_max_num_batched_tokens": [8192, 16384, 32768],
                "agg_max_num_seqs": [256, 512, 1024],
                "router_mode": ["round_robin"],
                "planner_scaling_policy": ["disabled"],
            },
            "workload": {"isl": 4096, "osl": 512, "request_rate": 16.0, "num_request_ratio": 30},
            "goal": {"target": "goodput_per_gpu", "sla": {"ttft_ms": 2000, "itl_ms": 50}},
            "sweep": {"algorithm": algorithm, "seed": seed, "candidates_per_round": PER_ROUND, "max_rounds": ROUNDS},
        }
    )


def grid(config: SmartSearchConfig, branch) -> dict[str, TrialResult]:
    """Every configuration of the branch, replayed in this process (cached on disk between runs)."""
    if CACHE.exists():
        return {k: TrialResult.model_validate(v) for k, v in json.loads(CACHE.read_text()).items()}
    results = {}
    knobs = branch.spec.knob_choices
    for record in branch.pool:
        for backend in record.backends:
            for tokens in knobs["agg_max_num_batched_tokens"]:
                for seqs in knobs["agg_max_num_seqs"]:
                    selection = {
                        "deployment_mode": "agg",
                        "backend": backend,
                        "agg_max_num_batched_tokens": tokens,
                        "agg_max_num_seqs": seqs,
                        "router_mode": "round_robin",
                        "planner_scaling_policy": "disabled",
                    }
                    spec = prepare_trial(
                        config, selection, record.config, backend_version=branch.spec.backend_versions[backend]
                    )
                    outcome = run_replay(spec.replay)
                    candidate = make_candidate(spec.sample, outcome.metrics, config.goal.target)
                    results[spec.key()] = TrialResult(
                        status="feasible",
                        metrics=candidate.metrics,
                        score=candidate.score,
                        used_gpus=spec.used_gpus,
                        average_gpus=average_gpus(outcome.metrics),
                    )
    CACHE.write_text(json.dumps({k: v.model_dump() for k, v in results.items()}))
    return results


def search(config: SmartSearchConfig, branch, table: dict[str, TrialResult]) -> tuple[float, float]:
    """Best score found within the budget, and the optimizer's mean seconds per round."""
    context = SearchContext(
        config=config, estimator=KvEstimator("Qwen/Qwen3-32B", "h200_sxm", branch.spec.backend_versions)
    )
    history, store, optimizer = None, {}, []
    for k in range(ROUNDS):
        suggestions, specs = suggest_round(
            context, branch.spec, branch.pool, k, history, {key: r.result for key, r in store.items()}
        )
        optimizer.append(suggestions.optimizer_seconds)
        for spec in specs:
            store[spec.key()] = TrialRecord(key=spec.key(), spec=spec, result=table[spec.key()])
        history = tell_round(config.goal, suggestions, {key: r.result for key, r in store.items()}, history)
        if history.stalled:
            break
    best = max((r.result.score for r in store.values()), default=0.0)
    return best, statistics.mean(optimizer)


def main() -> None:
    algorithms = sys.argv[1:] or ALGORITHMS
    base = config_for("eagle", 0)
    branch = enumerate_branches(base)[0]
    started = time.perf_counter()
    table = grid(base, branch)
    best = max(r.score for r in table.values())
    print(
        f"grid: {len(table)} configurations, best goodput/GPU {best:.1f} ({time.perf_counter() - started:.0f} s to replay or load)"
    )
    print(
        f"budget: {ROUNDS} rounds x {PER_ROUND} = {ROUNDS * PER_ROUND} evaluations ({100 * ROUNDS * PER_ROUND / len(table):.0f} % of the grid)"
    )
    print("| algorithm | share of the grid's best, median of 5 seeds | worst seed | optimizer s/round (mean) |")
    print("|---|---|---|---|")
    for algorithm in algorithms:
        shares, seconds = [], []
        for seed in SEEDS:
            found, optimizer = search(config_for(algorithm, seed), branch, table)
            shares.append(found / best)
            seconds.append(optimizer)
        print(
            f"| {algorithm} | {100 * statistics.median(shares):.1f} % | {100 * min(shares):.1f} % | {statistics.mean(seconds):.1f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
