"""Benchmark: do the sweep's answers hold on the next sample of traffic?

Results: docs/benchmarks/finish.md, "Answers on fresh traffic".

Landscapes (Qwen3-32B on H200, vLLM + SGLang, goodput per GPU under a mean TTFT / ITL SLA, agg + disagg, both
routers):
  light         8 GPUs, ISL 2048 / OSL 256 at 4 req/s, 160 requests;
  heavy         8 GPUs, ISL 4096 / OSL 512 at 12 req/s, 240 requests;
  trace         16 GPUs, the shipped Mooncake trace (3,993 requests, 17 min), no holdout: its fresh samples are
                block-bootstrap resamples (traces/resample.py);
  conversation  16 GPUs, a 12k-request conversation-shaped trace (bench/conversation_trace.py, seed 0).
Each landscape is searched `--sweeps` times (synthetic: on `arrival_seed` 1..N; a trace: the one trace, the
sweep's `seed` 1..N), through the sweep's own round logic (real Vizier, real replays: `run_round`, 2 branches x
3 rounds x 4 as the default config) and its own sequential finish (`run_finish`, default settings: 4 to 16
samples, a 5 % margin). Then every finished deployment is replayed on 40 evaluation samples, 40 of its sweep's own
(synthetic: arrival seeds from 10^6; a trace: resamples from 1000; never a search's or a finish's), the same
for every deployment of a sweep. Printed per landscape:
  - samples: the finish's samples per deployment (fewest / most over the sweeps) and its replays;
  - among the best: sweeps whose recommendation's evaluation mean is within the equivalence margin (5 %) of
    the best evaluation mean among the finished top (goal >= 9 / 10), next to the search's own #1;
  - bias: the reported statistic (summary.best_score: the mean of all the recommendation's finish samples)
    against its evaluation mean: sweeps within 3 % (goal >= 9 / 10), median and worst, next to the evaluation
    mean's own standard error (40 samples measure a deployment only so well);
  - decided: sweeps whose finish decided before its cap;
  - seconds: the search's rounds and the finish, in this process (the replays dominate both; on a trace the
    goal is a finish cheaper than the search's rounds), medians over the sweeps;
and, first, the wall of the default sweep (`spica run config/default.yaml`), median of 3 (the finish must not
make it grow: docs/benchmarks/sweep-cost.md gives the figure before the sequential finish).

Run: .venv/bin/python bench/robust_answers.py [--landscapes light,heavy,trace,conversation] [--sweeps 10]
     [--conversation-sweeps 3] [--no-wall] [--finish-max N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("DYN_LOG", "error")
sys.path.insert(0, str(Path(__file__).resolve().parent))

from timed_sweep import timed_sweep  # noqa: E402

from spica_lib.config import SmartSearchConfig  # noqa: E402
from spica_lib.config.narrow import narrowed  # noqa: E402
from spica_lib.facts.kv_capacity import KvEstimator  # noqa: E402
from spica_lib.pools.branches import enumerate_branches  # noqa: E402
from spica_lib.results.confidence import judge  # noqa: E402
from spica_lib.results.merge import collect_candidates, ordered, same_result_as  # noqa: E402
from spica_lib.results.sequential import run_finish  # noqa: E402
from spica_lib.search.in_process import run_round  # noqa: E402
from spica_lib.search.rounds import SearchContext  # noqa: E402
from spica_lib.trial.evaluate import evaluate_trials  # noqa: E402
from spica_lib.trial.spec import TrialResult, TrialSpec  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
TRACE = REPO / "data" / "traces" / "mooncake_synthetic_trace.jsonl"
EVALUATION_SAMPLES = 40
EVALUATION_SEED = 1_000_000  # evaluation arrival seeds: 10^6 + i, never a search's (1..10) or a finish's
EVALUATION_RESAMPLE = 1000  # evaluation resamples of a trace: from 1000, never a finish's (0..15)
MARGIN = 0.05
BIAS_GOAL = 0.03
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
TRACE_SPACE = {"gpu_budget": 16}
LANDSCAPES = {
    "light": ({}, {"isl": 2048, "osl": 256, "request_rate": 4.0, "num_request_ratio": 40}, {"ttft_ms": 1000, "itl_ms": 50}),
    "heavy": ({}, {"isl": 4096, "osl": 512, "request_rate": 12.0, "num_request_ratio": 20}, {"ttft_ms": 2000, "itl_ms": 60}),
    "trace": (TRACE_SPACE, {"trace_path": str(TRACE)}, {"ttft_ms": 5000, "itl_ms": 60}),
    "conversation": (TRACE_SPACE, {"trace_path": None}, {"ttft_ms": 5000, "itl_ms": 50}),
}


def conversation_trace() -> str:
    from conversation_trace import conversation_trace as generated

    return str(generated())


FINISH_MAX: int | None = None  # --finish-max: sweep.finish_max_samples (None: the default)


def config_for(landscape: str, sample: int) -> SmartSearchConfig:
    space, workload, sla = LANDSCAPES[landscape]
    workload = dict(workload)
    if landscape == "conversation":
        workload["trace_path"] = conversation_trace()
    sweep = {"max_rounds": 3, "candidates_per_round": 4, "parallel_evals": 2, "seed": 0, "baselines": False}
    if FINISH_MAX is not None:
        sweep["finish_max_samples"] = FINISH_MAX
    if "request_rate" in workload:
        workload["arrival_seed"] = sample
    else:
        sweep["seed"] = sample  # one trace: the search's own seed varies instead
    data = {"search_space": narrowed(SPACE, **space), "workload": workload,
            "goal": {"target": "goodput_per_gpu", "sla": sla}, "sweep": sweep}  # fmt: skip
    return SmartSearchConfig.from_mapping(data)


class Replays:
    """Real replays, each (trial key, traffic) replayed once per run of this script."""

    def __init__(self, limit: float):
        self.limit = limit
        self.cache: dict[str, TrialResult] = {}

    def many(self, specs: dict[str, TrialSpec]) -> dict[str, TrialResult]:
        todo = {spec.key(): spec for spec in specs.values() if spec.key() not in self.cache}
        if todo:
            self.cache.update(evaluate_trials(todo, max_eval_seconds=self.limit, parallel=2, warm=True))
        return {name: self.cache[spec.key()] for name, spec in specs.items()}

    def one(self, spec: TrialSpec) -> TrialResult:
        return self.many({"one": spec})["one"]


def search(config: SmartSearchConfig, replays: Replays):
    """The sweep's rounds in this process: trial records and ranking (as merge ranks it before the finish)."""
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


def finish_top(config: SmartSearchConfig, records, best):
    """The distinct top deployments, as the finish job takes them (run/jobs/ranked.py: finish_top)."""
    distinct = [row for row, earlier in zip(best, same_result_as(best), strict=True) if earlier is None]
    return {row.key: (records[row.key].spec, records[row.key].result) for row in distinct[: config.sweep.finish_top]}


def evaluation(spec: TrialSpec, replays: Replays, sweep: int) -> list[float]:
    """A deployment's scores on its sweep's 40 evaluation samples (0 where it was not feasible: it did not hold
    there). Each sweep has its own (all of the sweep's deployments the same ones), so that one unlucky set of 40
    does not shift every sweep's comparison the same way."""
    workload = spec.replay.workload
    first = EVALUATION_SAMPLES * sweep
    if workload.draws_arrivals:
        fresh = {str(i): workload.model_copy(update={"arrival_seed": EVALUATION_SEED + first + i})
                 for i in range(EVALUATION_SAMPLES)}  # fmt: skip
        specs = {i: spec.model_copy(update={"replay": spec.replay.model_copy(update={"workload": w})}) for i, w in fresh.items()}
    else:
        specs = {str(i): spec.on_fresh_sample(EVALUATION_RESAMPLE + first + i) for i in range(EVALUATION_SAMPLES)}
    return [_score(result) for result in replays.many(specs).values()]


def _score(result: TrialResult) -> float:
    return float(result.score) if result.status == "feasible" and result.score is not None else 0.0


def landscape_rows(landscape: str, sweeps: int) -> None:
    replays = Replays(600.0)
    rows = []
    started = time.perf_counter()
    for sample in range(1, sweeps + 1):
        config = config_for(landscape, sample)
        searched = time.perf_counter()
        records, best = search(config, replays)
        search_seconds = time.perf_counter() - searched
        if not best:
            print(f"  {landscape} sample {sample}: no feasible deployment", flush=True)
            continue
        top = finish_top(config, records, best)
        finishing = time.perf_counter()
        result = run_finish(config, top, replays.many)
        finish_seconds = time.perf_counter() - finishing
        verdict = judge(result)
        scores = {key: evaluation(records[key].spec, replays, sample) for key in top}
        means = {key: statistics.fmean(values) for key, values in scores.items()}
        chosen = verdict.ranks[0]
        best_mean = max(means.values())
        counts = [len(d.samples) for d in result.deployments]
        rows.append({
            "among": means[chosen.key] >= (1 - MARGIN) * best_mean,
            "search_among": means[best[0].key] >= (1 - MARGIN) * best_mean,
            "bias": chosen.statistic / means[chosen.key] - 1 if means[chosen.key] else float("nan"),
            "search_bias": best[0].candidate.score / means[best[0].key] - 1 if means[best[0].key] else float("nan"),
            "evaluation_se": statistics.stdev(scores[chosen.key]) / len(scores[chosen.key]) ** 0.5 / means[chosen.key]
            if means[chosen.key] else float("nan"),
            "fewest": min(counts), "most": max(counts),
            "replays": sum(s.replayed for d in result.deployments for s in d.samples),
            "decided": verdict.decided, "search_s": search_seconds, "finish_s": finish_seconds,
        })  # fmt: skip
        row = rows[-1]
        print(f"  {landscape} sample {sample} done ({time.perf_counter() - started:.0f} s): {result.stopped}; "
              f"among the best: {'yes' if row['among'] else 'no'}, reported vs evaluation {row['bias']:+.1%}", flush=True)
    if not rows:
        return
    n = len(rows)
    bias = [r["bias"] for r in rows]
    search_bias = [r["search_bias"] for r in rows]
    within = sum(abs(b) <= BIAS_GOAL for b in bias)
    print(
        f"{landscape:<12} samples per deployment {min(r['fewest'] for r in rows)}-{max(r['most'] for r in rows)} "
        f"(median most {statistics.median(r['most'] for r in rows):g}), finish replays median "
        f"{statistics.median(r['replays'] for r in rows):g}; decided before the cap {sum(r['decided'] for r in rows)}/{n}; "
        f"recommendation among the best {sum(r['among'] for r in rows)}/{n} (the search's own #1: "
        f"{sum(r['search_among'] for r in rows)}/{n}); reported statistic within {BIAS_GOAL:.0%} of its evaluation "
        f"mean {within}/{n} (median {statistics.median(bias):+.1%}, worst {max(bias, key=abs):+.1%}; the search's "
        f"own best: median {statistics.median(search_bias):+.1%}, worst {max(search_bias, key=abs):+.1%}; the "
        f"evaluation mean's own standard error, median {statistics.median(r['evaluation_se'] for r in rows):.1%}); "
        f"seconds in this process: search {statistics.median(r['search_s'] for r in rows):.0f}, finish "
        f"{statistics.median(r['finish_s'] for r in rows):.0f} (medians)",
        flush=True,
    )


def default_wall() -> float:
    import yaml

    data = yaml.safe_load((REPO / "config" / "default.yaml").read_text())
    return timed_sweep(data, 2, lambda run: None)[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--landscapes", default="light,heavy,trace,conversation")
    parser.add_argument("--sweeps", type=int, default=10)
    parser.add_argument("--conversation-sweeps", type=int, default=3)
    parser.add_argument("--no-wall", action="store_true")
    parser.add_argument("--finish-max", type=int, default=None, help="sweep.finish_max_samples (default: the default)")
    args = parser.parse_args()
    global FINISH_MAX
    FINISH_MAX = args.finish_max
    if not args.no_wall:  # first, on a quiet machine
        walls = [default_wall() for _ in range(3)]
        print(f"default sweep wall: median {statistics.median(walls):.1f} s of {[round(w, 1) for w in walls]}", flush=True)
    for landscape in filter(None, args.landscapes.split(",")):  # "" (with the wall alone): none
        landscape_rows(landscape, args.conversation_sweeps if landscape == "conversation" else args.sweeps)


if __name__ == "__main__":
    main()
