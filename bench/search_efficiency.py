"""Benchmark (b): how close each algorithm gets to a branch's best within a budget, with and without the warm start.

Four landscapes (Qwen3-32B on up to 8 H200, vLLM + SGLang, goodput per GPU under a mean TTFT / ITL SLA):
  heavy  agg, ISL 4096 / OSL 512 at 16 req/s, 3 batched-token x 3 max-seq values: the knobs matter;
  heavy_reversed  the same, each knob listed largest first (the warm start's seeds take the first);
  light  agg, ISL 2048 / OSL 256 at 2 req/s, both routers, 2 max-seq values: the fewest GPUs that
         meet the SLA win;
  disagg disagg, ISL 2048 / OSL 256 at 8 req/s: 71 prefill x decode layouts on two backends.
Each landscape is replayed exhaustively first (every layout x backend x knob combination, through the
sweep's own trial path: real replays in a warm worker, screening included), cached on disk under a
key of the landscape's config, the source a replay depends on and the Dynamo / aiconfigurator versions. Each
algorithm then searches it through the real round logic (`run_round`: suggest, refills, tell; Vizier as
in a sweep, `sweep.rounds_in_flight` ordered as a sweep orders them: run_search) with replays looked up in
that table: 4 rounds x 4 (16 evaluations, the held-out config's budget) and 8 rounds x 4 (32), 10 seeds
each, with and without the warm start, each round waiting for the one before (1 round in flight) and
with 2 rounds in flight.
Printed: every per-seed share of the landscape's best, the median and worst per cell, and the
Spearman correlation between the static estimate's order and the replay's.

Run: .venv/bin/python bench/search_efficiency.py [--algorithms nsga2,random,...] [--seeds N] [--landscapes heavy,...]
     [--budgets 16,32] [--in-flight 1,2]
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import os
import statistics
import time
from pathlib import Path

os.environ.setdefault("DYN_LOG", "error")

from spica_lib.base.versions import package_versions  # noqa: E402
from spica_lib.config import SmartSearchConfig  # noqa: E402
from spica_lib.facts.kv_capacity import KvEstimator  # noqa: E402
from spica_lib.pools.branches import enumerate_branches  # noqa: E402
from spica_lib.pools.estimate import StepModel  # noqa: E402
from spica_lib.search.in_process import run_search  # noqa: E402
from spica_lib.search.rounds import SearchContext  # noqa: E402
from spica_lib.search.space import BranchSpace  # noqa: E402
from spica_lib.search.warm_start import estimate_order, rank_pool, seed_parameters  # noqa: E402
from spica_lib.trial.evaluate import evaluate_trials, prepare_trial  # noqa: E402
from spica_lib.trial.spec import TrialResult  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
ALGORITHMS = ["nsga2", "eagle", "random", "quasi_random"]  # gp_ucb_pe: 50-90 s per round here, opt in
BUDGETS = [(4, 4), (8, 4)]  # (rounds, candidates per round)
SLA = {"target": "goodput_per_gpu", "sla": {"ttft_ms": 2000, "itl_ms": 50}}
BASE_SPACE = {
    "model_name": "Qwen/Qwen3-32B",
    "hardware_sku": "h200_sxm",
    "gpu_budget": 8,
    "backend": ["vllm", "sglang"],
}
LANDSCAPES = {
    "heavy": (
        {
            "deployment_mode": ["agg"],
            "agg_max_num_batched_tokens": [8192, 16384, 32768],
            "agg_max_num_seqs": [256, 512, 1024],
            "router_mode": ["round_robin"],
        },
        {"isl": 4096, "osl": 512, "request_rate": 16.0, "num_request_ratio": 30},
    ),
    # The same grid with each knob listed largest first: round 0's seeds (first choices) start on knobs
    # that miss, and the designer has to find the winning ones.
    "heavy_reversed": (
        {
            "deployment_mode": ["agg"],
            "agg_max_num_batched_tokens": [32768, 16384, 8192],
            "agg_max_num_seqs": [1024, 512, 256],
            "router_mode": ["round_robin"],
        },
        {"isl": 4096, "osl": 512, "request_rate": 16.0, "num_request_ratio": 30},
    ),
    "light": (
        {
            "deployment_mode": ["agg"],
            "agg_max_num_batched_tokens": [8192],
            "agg_max_num_seqs": [256, 512],
            "router_mode": ["round_robin", "kv_router"],
            "overlap_score_credit": [0.5, 1.0],
            "prefill_load_scale": [1.0],
            "router_temperature": [0.0],
        },
        {"isl": 2048, "osl": 256, "request_rate": 2.0, "num_request_ratio": 60},
    ),
    "disagg": (
        {
            "deployment_mode": ["disagg"],
            "router_mode": ["round_robin"],
            "prefill_max_num_batched_tokens": [8192],
            "prefill_max_num_seqs": [8],
            "decode_max_num_seqs": [256],
        },
        {"isl": 2048, "osl": 256, "request_rate": 8.0, "num_request_ratio": 30},
    ),
}


def config_for(
    landscape: str, algorithm: str, seed: int, rounds: int, per_round: int, warm: bool, in_flight: int = 1
) -> SmartSearchConfig:
    space, workload = LANDSCAPES[landscape]
    return SmartSearchConfig.from_mapping(
        {
            "search_space": {**BASE_SPACE, **space, "planner_scaling_policy": ["disabled"]},
            "workload": workload,
            "goal": SLA,
            "sweep": {
                "algorithm": algorithm,
                "seed": seed,
                "candidates_per_round": per_round,
                "max_rounds": rounds,
                "warm_start": warm,
                "parallel_evals": 2,
                "rounds_in_flight": in_flight,
            },
        }
    )


# The packages a trial's result depends on (those below search/ in tests/test_layering.py): a change to the
# search itself replays nothing again, and a change to how a trial is built or replayed replays everything.
REPLAY_PACKAGES = ("base", "facts", "config", "pools", "predictor", "replay", "trial")


def cache_path(config: SmartSearchConfig) -> Path:
    """Keyed by the landscape's config, the source of the packages a replay depends on and the simulator's
    versions: never a fixed path."""
    digest = hashlib.sha256()
    landscape = config.model_dump(mode="json", exclude={"sweep"})
    digest.update(json.dumps(landscape, sort_keys=True).encode())
    for package in REPLAY_PACKAGES:
        for path in sorted((REPO / "spica_lib" / package).rglob("*.py")):
            digest.update(path.read_bytes())
    versions = package_versions()
    digest.update(
        json.dumps({k: versions.get(k) for k in ("ai-dynamo", "aiconfigurator-core")}, sort_keys=True).encode()
    )
    root = Path(os.environ.get("SPICA_BENCH_CACHE", Path.home() / ".cache" / "spica" / "bench"))
    return root / f"landscape-{digest.hexdigest()[:20]}.json"


def landscape_table(config: SmartSearchConfig, branch) -> dict[str, TrialResult]:
    """Every configuration of the branch, replayed the way a sweep replays it (cached on disk)."""
    path = cache_path(config)
    if path.exists():
        return {k: TrialResult.model_validate(v) for k, v in json.loads(path.read_text()).items()}
    space = BranchSpace(branch.spec, branch.pool)
    searched = {k.name: list(k.choices) if k.kind == "categorical" else list(k.values) for k in space.knobs}
    specs = {}
    for record in branch.pool:
        for backend in record.backends:
            base = seed_parameters(space, record.config, backend)
            names = [n for n in searched if n != "backend"]
            for values in itertools.product(*(searched[n] for n in names)):
                params = dict(base)
                for name, value in zip(names, values, strict=True):
                    knob = next(k for k in space.knobs if k.name == name)
                    params[name] = knob.values[list(knob.choices).index(value)] if knob.kind == "categorical" else value
                selection = space.decode(params)
                spec = prepare_trial(
                    config,
                    selection.values,
                    selection.parallel_config,
                    backend_version=branch.spec.backend_versions[backend],
                )
                specs.setdefault(spec.key(), spec)
    results = dict(evaluate_trials(specs, max_eval_seconds=config.sweep.max_eval_seconds, parallel=2, warm=True))
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(f".{os.getpid()}.tmp")
    temporary.write_text(json.dumps({k: v.model_dump(mode="json") for k, v in results.items()}))
    temporary.replace(path)
    return results


def search_in_child(config: SmartSearchConfig, branch, table: dict[str, TrialResult]) -> float:
    """`search` in a child forked from this process, as a sweep runs each suggest: the GP designers'
    compiled programs pile up in one long process until LLVM cannot allocate (seen with GP-UCB-PE)."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("fork")) as pool:
        return pool.submit(search, config, branch, table).result()


def search(config: SmartSearchConfig, branch, table: dict[str, TrialResult]) -> float:
    """Best feasible score the search finds within its budget (sweep.rounds_in_flight as a sweep orders them)."""
    context = SearchContext(
        config=config, estimator=KvEstimator("Qwen/Qwen3-32B", "h200_sxm", branch.spec.backend_versions)
    )
    store = {}
    run_search(context, branch.spec, branch.pool, store, lambda spec: table[spec.key()])
    return max((r.result.score for r in store.values() if r.result.status == "feasible"), default=0.0)


def spearman_of_estimate(config: SmartSearchConfig, branch, table: dict[str, TrialResult]) -> tuple[float, float]:
    """Spearman's rho between the estimate's order and the replay's (knobs at their first choice, as a seed
    replays them), and the replayed share of the best for the estimate's top pick."""
    from scipy.stats import spearmanr

    space = BranchSpace(branch.spec, branch.pool)
    model = StepModel(config.search_space.model_name, config.search_space.hardware_sku, branch.spec.backend_versions)
    ranked = rank_pool(config, branch.pool, model)
    replayed = []
    for item in ranked:
        selection = space.decode(seed_parameters(space, item.config, item.backend))
        spec = prepare_trial(
            config,
            selection.values,
            selection.parallel_config,
            backend_version=branch.spec.backend_versions[item.backend],
        )
        result = table[spec.key()]
        replayed.append(result.score if result.status == "feasible" else -(result.sla_miss or 1e3))
    order = estimate_order(ranked, config.goal.target.value)
    place = {index: position for position, index in enumerate(order)}
    rho = spearmanr([-place[i] for i in range(len(ranked))], replayed).statistic
    best = max(r.score for r in table.values() if r.status == "feasible")
    top = order[0]
    return float(rho), max(replayed[top], 0.0) / best


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--algorithms", default=",".join(ALGORITHMS))
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--landscapes", default=",".join(LANDSCAPES))
    parser.add_argument("--budgets", default=",".join(str(r * n) for r, n in BUDGETS), help="evaluations per branch")
    parser.add_argument("--in-flight", default="1,2", help="sweep.rounds_in_flight values (1: each round waits)")
    args = parser.parse_args()
    windows = [int(w) for w in args.in_flight.split(",")]
    budgets = [(r, n) for r, n in BUDGETS if str(r * n) in args.budgets.split(",")]
    algorithms, seeds = args.algorithms.split(","), list(range(args.seeds))
    summary = []
    for landscape in args.landscapes.split(","):
        base = config_for(landscape, "nsga2", 0, 4, 4, True)
        branch = enumerate_branches(base)[0]
        clock = time.perf_counter()
        table = landscape_table(base, branch)
        feasible = [r.score for r in table.values() if r.status == "feasible"]
        best = max(feasible)
        near = sum(score >= 0.99 * best for score in feasible)
        print(
            f"\n## {landscape}: {len(table)} distinct trials, best {best:.1f}, {near} within 1 % of it, "
            f"{sum(s == 0 for s in feasible) + len(table) - len(feasible)} score 0 or infeasible "
            f"({time.perf_counter() - clock:.0f} s to replay or load)"
        )
        rho, top_share = spearman_of_estimate(base, branch, table)
        print(f"estimate vs replay: Spearman {rho:.2f}, its top pick replays at {100 * top_share:.1f} % of the best")
        cells = itertools.product(budgets, algorithms, (False, True), windows)
        for (rounds, per_round), algorithm, warm, window in cells:
            shares = []
            for seed in seeds:
                setup = config_for(landscape, algorithm, seed, rounds, per_round, warm, window)
                shares.append(search_in_child(setup, branch, table) / best)
            row = (landscape, rounds * per_round, algorithm, warm, window, statistics.median(shares), min(shares))
            summary.append(row)
            per_seed = " ".join(f"{100 * s:.1f}" for s in shares)
            print(f"{rounds * per_round} evals, {algorithm}, warm start {'on' if warm else 'off'}, "
                  f"{window} round(s) in flight: {per_seed}", flush=True)  # fmt: skip
    print("\n| landscape | evaluations | algorithm | warm start | rounds in flight | median share of the best "
          "| worst seed |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    for landscape, evals, algorithm, warm, window, median, worst in summary:
        print(f"| {landscape} | {evals} | {algorithm} | {'on' if warm else 'off'} | {window} | {100 * median:.1f} % "
              f"| {100 * worst:.1f} % |")  # fmt: skip


if __name__ == "__main__":
    main()
