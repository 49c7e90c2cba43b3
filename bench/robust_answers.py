"""Benchmark: do the sweep's answers hold on the next sample of traffic? (docs/benchmarks.md, "Answers on fresh traffic")

Three landscapes (Qwen3-32B on up to 8 H200 (16 for the trace), vLLM + SGLang, goodput per GPU under a TTFT / ITL
SLA; both routers on the synthetic ones):
  light  agg + disagg, ISL 2048 / OSL 256 at 4 req/s, 160 requests;
  heavy  agg + disagg, ISL 4096 / OSL 512 at 12 req/s, 240 requests;
  trace  agg, round robin, the shipped Mooncake trace with its last 25 % of time held out (`workload.holdout: 0.25`):
         its finish is one exact replay of the held-out part per deployment, so S does not apply.
Each landscape is searched 10 times, each time on another workload sample (synthetic: `arrival_seed` 1..10;
trace: the one trace, the sweep's `seed` 1..10), through the sweep's own round logic (real Vizier, real
replays: `run_round`, 2 branches x 3 rounds x 4 as the default config) and its own finish (`finished`,
`judge`), for each (finish_top K, finish_samples S) in the grid. Then every finished deployment is replayed on
40 evaluation samples (synthetic: arrival seeds from 10^6, disjoint from the search's and the finish's; trace:
its held-out part, which round robin replays exactly, so one replay stands for all 40). Printed per
landscape and (K, S):
  - held: sweeps whose recommendation is statistically among the best: its evaluation mean within one
    standard error (of the best's mean) of the best evaluation mean among the finished top (goal >= 9 / 10);
  - bias: the reported best (summary.best_score: the finish's statistic) against the recommendation's
    evaluation mean, median and worst over the sweeps (goal within 3 %), next to the search's own best score
    against its evaluation mean (what was reported before the finish);
and, first, the wall of the default sweep (`spica run config/default.yaml`) with and without the finish
(`sweep.finish_samples: 0`), median of 3 each, side by side in this run (goal: the finish adds <= 25 %).

Run: .venv/bin/python bench/robust_answers.py [--landscapes light,heavy,trace] [--sweeps 10] [--grid 3x4,4x6,5x8]
     [--no-wall]
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("DYN_LOG", "error")

from spica_lib.config import SmartSearchConfig  # noqa: E402
from spica_lib.config.narrow import narrowed  # noqa: E402
from spica_lib.facts.kv_capacity import KvEstimator  # noqa: E402
from spica_lib.pools.branches import enumerate_branches  # noqa: E402
from spica_lib.results.confidence import judge  # noqa: E402
from spica_lib.results.finish import finished, sample_kind, sample_specs  # noqa: E402
from spica_lib.results.merge import collect_candidates, ordered  # noqa: E402
from spica_lib.search.in_process import run_round  # noqa: E402
from spica_lib.search.rounds import SearchContext  # noqa: E402
from spica_lib.trial.evaluate import evaluate_trials  # noqa: E402
from spica_lib.trial.spec import TrialResult, TrialSpec  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
TRACE = REPO / "data" / "traces" / "mooncake_synthetic_trace.jsonl"
EVALUATION_SAMPLES = 40
EVALUATION_SEED = 1_000_000  # evaluation arrival seeds: 10^6 + i, never a search's (1..10) or a finish's
SPACE = {
    "model_name": "Qwen/Qwen3-32B",
    "hardware_sku": "h200_sxm",
    "gpu_budget": 8,
    "deployment_mode": ["agg", "disagg"],
    "backend": ["vllm", "sglang"],
    "agg_max_num_seqs": [256, 512],
    "prefill_max_num_seqs": [8, 32],
    "decode_max_num_seqs": [256, 512],
    "router_mode": ["round_robin", "kv_router"],
    "overlap_score_credit": [0.5, 1.0],
    "prefill_load_scale": [1.0],
    "router_temperature": [0.0],
    "planner_scaling_policy": ["disabled"],
}
SLA = {"ttft_ms": 1000, "itl_ms": 50}
LANDSCAPES = {
    "light": ({}, {"isl": 2048, "osl": 256, "request_rate": 4.0, "num_request_ratio": 40}, SLA),
    "heavy": ({}, {"isl": 4096, "osl": 512, "request_rate": 12.0, "num_request_ratio": 20}, {"ttft_ms": 2000, "itl_ms": 60}),
    "trace": (
        {"deployment_mode": ["agg"], "gpu_budget": 16, "router_mode": ["round_robin"]},
        {"trace_path": str(TRACE), "holdout": 0.25},
        {"ttft_ms": 5000, "itl_ms": 60},
    ),
}


def config_for(landscape: str, sample: int, top: int, samples: int) -> SmartSearchConfig:
    space, workload, sla = LANDSCAPES[landscape]
    workload = dict(workload)
    sweep = {"max_rounds": 3, "candidates_per_round": 4, "parallel_evals": 2, "seed": 0, "baselines": False,
             "finish_top": top}  # fmt: skip
    if "request_rate" in workload:
        workload["arrival_seed"] = sample
        sweep["finish_samples"] = samples
    else:
        sweep["seed"] = sample  # one trace: the search's own seed varies instead; its held-out part is one sample
    return SmartSearchConfig.from_mapping(
        {"search_space": narrowed(SPACE, **space), "workload": workload, "goal": {"target": "goodput_per_gpu", "sla": sla},
         "sweep": sweep}  # fmt: skip
    )


class Replays:
    """Real replays, each (trial key, traffic) replayed once per run of this script."""

    def __init__(self, limit: float):
        self.limit = limit
        self.cache: dict[str, TrialResult] = {}

    def many(self, specs: dict[str, TrialSpec]) -> dict[str, TrialResult]:
        todo = {spec.key(): spec for name, spec in specs.items() if spec.key() not in self.cache}
        if todo:
            self.cache.update(evaluate_trials(todo, max_eval_seconds=self.limit, parallel=2, warm=True))
        return {name: self.cache[spec.key()] for name, spec in specs.items()}

    def one(self, spec: TrialSpec) -> TrialResult:
        return self.many({"one": spec})["one"]


def search(config: SmartSearchConfig, replays: Replays):
    """The sweep's rounds in this process: histories, trial records, ranking (as merge ranks it before the finish)."""
    histories, records = [], {}
    for branch in enumerate_branches(config):
        if branch.spec.status != "ready":
            continue
        space = config.search_space
        context = SearchContext(
            config=config, estimator=KvEstimator(space.model_name, space.hardware_sku, branch.spec.backend_versions)
        )
        history, store = None, {}
        for k in range(config.sweep.max_rounds):
            history, _ = run_round(context, branch.spec, branch.pool, k, history, store, replays.one)
        histories.append(history)
        records.update(store)
    return records, ordered(config, collect_candidates(histories, records))


def finish(config: SmartSearchConfig, records, best, replays: Replays):
    top = {row.key: (records[row.key].spec, records[row.key].result) for row in best[: config.sweep.finish_top]}
    specs = sample_specs({k: spec for k, (spec, _) in top.items()}, sample_kind(config), config.sweep.finish_samples or 0)
    results = replays.many(specs)
    return judge(finished(config, top, {name: (specs[name], results[name]) for name in specs}))


def evaluation(spec: TrialSpec, replays: Replays) -> list[float]:
    """A deployment's scores on the evaluation samples (0 where it was not feasible: it did not hold there)."""
    workload = spec.replay.workload
    if workload.draws_arrivals:
        specs = {
            str(i): spec.model_copy(update={"replay": spec.replay.model_copy(update={"workload": workload.model_copy(update={"arrival_seed": EVALUATION_SEED + i})})})
            for i in range(EVALUATION_SAMPLES)
        }  # fmt: skip
        return [_score(result) for result in replays.many(specs).values()]
    # A trace's held-out part, replayed exactly by round robin (the trace landscape searches round robin only).
    return [_score(replays.one(spec.on_fresh_sample(0)))] * EVALUATION_SAMPLES


def _score(result: TrialResult) -> float:
    return float(result.score) if result.status == "feasible" and result.score is not None else 0.0


def mean_and_error(values: list[float]) -> tuple[float, float]:
    return statistics.fmean(values), statistics.stdev(values) / math.sqrt(len(values)) if len(values) > 1 else 0.0


def landscape_rows(landscape: str, sweeps: int, grid: list[tuple[int, int]]) -> None:
    limit = 300.0
    replays = Replays(limit)
    outcomes: dict[tuple[int, int], list[tuple[bool, float, float]]] = {cell: [] for cell in grid}
    started = time.perf_counter()
    for sample in range(1, sweeps + 1):
        base = config_for(landscape, sample, max(k for k, _ in grid), max(s for _, s in grid))
        records, best = search(base, replays)
        if not best:
            print(f"  {landscape} sample {sample}: no feasible deployment", flush=True)
            continue
        evaluations = {}
        for k, s in grid:
            config = config_for(landscape, sample, k, s)
            verdict = finish(config, records, best, replays)
            for rank in verdict.ranks:
                if rank.key not in evaluations:
                    evaluations[rank.key] = evaluation(records[rank.key].spec, replays)
            means = {key: mean_and_error(evaluations[key]) for key in (r.key for r in verdict.ranks)}
            best_mean, best_error = max(means.values())
            chosen = verdict.ranks[0]
            chosen_mean = means[chosen.key][0]
            held = chosen_mean >= best_mean - max(best_error, 1e-9)
            reported = chosen.statistic if chosen.statistic is not None else float("nan")
            search_best = best[0].candidate.score
            search_mean = means[best[0].key][0]  # the search's own #1 is always among the finished top
            search_held = search_mean >= best_mean - max(best_error, 1e-9)
            outcomes[(k, s)].append(
                (held, reported / chosen_mean - 1, search_best / search_mean - 1, search_held, verdict.kendall_tau,
                 verdict.recommended_meets_sla)
            )  # fmt: skip
        print(f"  {landscape} sample {sample} done ({time.perf_counter() - started:.0f} s)", flush=True)
    for (k, s), rows in outcomes.items():
        if not rows:
            continue
        held, search_held = sum(r[0] for r in rows), sum(r[3] for r in rows)
        bias, search_bias = [r[1] for r in rows], [r[2] for r in rows]
        taus = [r[4] for r in rows if r[4] is not None]
        meets = sum(r[5] is True for r in rows)
        cell = "K=" + str(k) + ("" if landscape == "trace" else f" S={s}")
        line = (
            f"{landscape:<6} {cell}: recommendation among the best {held}/{len(rows)} (the search's own #1: "
            f"{search_held}/{len(rows)}); "
        )
        if landscape == "trace":  # the finish replays the held-out part itself: its score is the evaluation
            line += "reported best = its held-out score; the search's own best vs its held-out score: "
        else:
            line += (
                f"reported best vs its evaluation mean: median {statistics.median(bias):+.1%}, worst "
                f"{max(bias, key=abs):+.1%}; the search's own best vs its evaluation mean: "
            )
        line += f"median {statistics.median(search_bias):+.1%}, worst {max(search_bias, key=abs):+.1%}; "
        line += f"Kendall's tau median {statistics.median(taus):.2f}; " if taus else ""
        line += f"recommendation meets the SLA on every sample in {meets}/{len(rows)}"
        print(line, flush=True)


def sweep_wall(finish_samples: int | None) -> float:
    """Wall seconds of `spica run` on the default config in a fresh folder."""
    import yaml

    data = yaml.safe_load((REPO / "config" / "default.yaml").read_text())
    if finish_samples is not None:
        data["sweep"]["finish_samples"] = finish_samples
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "default.yaml"
        path.write_text(yaml.safe_dump(data))
        started = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "spica_lib.cli", "run", str(path), "--cores", "2"],
            cwd=folder, check=True, capture_output=True, timeout=1800,
        )  # fmt: skip
        return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--landscapes", default="light,heavy,trace")
    parser.add_argument("--sweeps", type=int, default=10)
    parser.add_argument("--grid", default="3x4,4x6,5x8")
    parser.add_argument("--no-wall", action="store_true")
    args = parser.parse_args()
    grid = [tuple(int(x) for x in cell.split("x")) for cell in args.grid.split(",")]
    if not args.no_wall:  # first, on a quiet machine
        walls = {"without the finish": [], "with the finish (default)": []}
        for _ in range(3):  # interleaved, so that both see the same machine
            walls["without the finish"].append(sweep_wall(0))
            walls["with the finish (default)"].append(sweep_wall(None))
        medians = {name: statistics.median(values) for name, values in walls.items()}
        for name, value in medians.items():
            print(f"default sweep wall, {name}: median {value:.1f} s of {[round(v, 1) for v in walls[name]]}", flush=True)
        ratio = medians["with the finish (default)"] / medians["without the finish"] - 1
        print(f"the finish adds {ratio:+.0%} to the default sweep's wall", flush=True)
    for landscape in args.landscapes.split(","):
        landscape_rows(landscape, args.sweeps, grid)


if __name__ == "__main__":
    main()
