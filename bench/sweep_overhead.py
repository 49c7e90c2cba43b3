"""Benchmark: what a sweep costs around its replays, three ways (median of 3 runs from scratch each).

1. The embedded default sweep (24 short replays) after install, `--cores 2`, side by side: with
   aiconfigurator's answer searched (an empty cache, as a first run) and cached, and cached without
   the stress test (what it costs). For each, its wall and the
   breakdown of where the time went: the one-time work before round 0 (validate ... branches),
   Dynamo + perf-DB warm-up for the replay jobs (in the sweep's warm host), the replays themselves, the optimizer, and the rest
   (Snakemake's scheduling, job starts, suggest and tell processes).
2. P1 = wall x cores / sum of warm replay CPU, published two ways: over the search's own replays (the
   goal, <= 1.5) and over every replay the sweep runs (the finish's fresh samples, the stress test,
   the baselines and the capacity bisection too), so that a post-search replay cut shows as a
   shorter wall and not as a worse ratio. On a sweep whose replays are real work: the shipped
   Mooncake trace (3,993 requests per replay), agg, 8 rounds x 4 candidates = 32 trials. (Disagg is
   left out: some disagg layouts queue so deep on this trace that their replay runs to the time
   limit, and burnt CPU would flatter the ratio.) "Warm replay CPU" is the CPU time of each trial's
   forked child: the replay, without imports or perf-DB load. 1.0 would mean both cores did nothing
   but replay. The same sweep shape is also measured on longer replays (24,000 synthetic requests
   each), where the same fixed costs weigh less.
3. Per-round overhead: the same tiny sweep (40-request replays, 2 per round, one branch) with 2 and
   with 8 rounds; (wall(8) - wall(2)) / 6 is what one more round costs beyond its replays.
4. `conversation` (not in the default list: about 20 minutes): issue 40's real-trace sweep, the default
   space on the 12,031-request conversation-shaped trace of bench/conversation_trace.py, 3 rounds x 4,
   its wall split at the last tell into the search and what follows (finish, stress test, baselines,
   merge, report), with the replay CPU of each, and how much of the finish's and the stress test's the
   branches' finish shares ran during the search (results/finish_share.py); 3 runs with aiconfigurator's
   answer searched (as a first run) and 3 with it cached, as for the default sweep.
5. `conversation-lean` (not in the default list: about 25 minutes): the same sweep, aiconfigurator's answer
   cached, side by side with its defaults, with `sweep.finish_top: 3` (the finish ranks the top_k the report
   shows, not one more) and with the stress test off too: what the work after the search costs by the
   settings that size it, and whether the recommendation moves.

6. `conversation-sample` (not in the default list: about 15 minutes): the same sweep with its defaults and with
   `sweep.search_sample: auto`, side by side, each the median of 3, and what each recommends.

Run: .venv/bin/python bench/sweep_overhead.py [default|p1|rounds|conversation|conversation-lean|conversation-sample ...]
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

import yaml

from spica_lib.config.narrow import narrowed

REPO = Path(__file__).resolve().parents[1]
CORES = 2
RUNS = 3


def sweep(data: dict, aic_cache: str | None = None) -> dict:
    """Run one sweep from scratch; return its wall, summary, trial records and job logs.

    aiconfigurator's answers are cached by their inputs (spica_lib/baselines/aiconfigurator_cache.py):
    `aic_cache` names the cache to use; None gives the run an empty one of its own (a first run).
    """
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        env = {**os.environ, "SPICA_AIC_CACHE": aic_cache or str(folder / "aic-cache")}
        config = folder / "spica.yaml"
        config.write_text(yaml.safe_dump(data, sort_keys=False))
        started = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-m", "spica_lib.cli", "run", str(config), "--cores", str(CORES)],
            cwd=folder,
            capture_output=True,
            text=True,
            check=False,
            env=env,
        )
        wall = time.perf_counter() - started
        if done.returncode != 0:
            raise SystemExit(done.stderr[-3000:])
        run = next((folder / "results").iterdir())
        return {
            "wall": wall,
            "summary": json.loads((run / "summary.json").read_text()),
            "trials": [json.loads(p.read_text())["result"] for p in run.glob("rounds/*/*/trials/*/*.json")],
            "warm_up": [
                float(s)
                for log in run.glob("logs/rounds/*/*/replay/*.log")
                for s in re.findall(r"ready after ([0-9.]+) s", log.read_text())
            ],
            "setup": _setup_seconds(run),
            "after_search": _after_search_seconds(run),
            "post_search_cpu": post_search_cpu(run),
            "ahead_cpu": ahead_cpu(run),
        }


def post_search_cpu(run: Path) -> dict[str, float]:
    """CPU seconds of the replays after the search, by stage, from the run's own files."""
    def read(path: Path) -> dict:
        return json.loads(path.read_text()) if path.is_file() else {}

    finish = sum(json.loads(p.read_text())["result"]["cpu_seconds"] for p in run.glob("journal/*#*.json"))
    stress = sum(s.get("cpu_seconds", 0.0) for s in read(run / "stress.json").get("scores", []))
    baselines = sum((b.get("result") or {}).get("cpu_seconds", 0.0)
                    for b in read(run / "baselines.json").get("baselines", []) if b.get("source") == "replayed")  # fmt: skip
    capacity = sum(p.get("cpu_seconds", 0.0) for d in read(run / "capacity.json").get("deployments", [])
                   for p in d.get("points", []) + d.get("confirmed", []))  # fmt: skip
    return {"finish": finish, "stress": stress, "baselines": baselines, "capacity": capacity}


def ahead_cpu(run: Path) -> float:
    """CPU seconds of the finish and stress replays the branches' finish shares ran while another branch searched."""
    names = {name for p in run.glob("finish_shares/*.json") for name in json.loads(p.read_text())["replayed"]}
    return sum(json.loads((run / "journal" / f"{name}.json").read_text())["result"]["cpu_seconds"] for name in names)


def _setup_seconds(run: Path) -> float:
    """From the first stage's start to the first suggest's start (validate, policies, predictor, branches)."""

    def first_stamp(log: Path) -> datetime:
        return _stamp(log.read_text())

    start = first_stamp(run / "logs" / "validate.log")
    suggest = min(first_stamp(log) for log in run.glob("logs/rounds/*/0/suggest.log"))
    return (suggest - start).total_seconds()


def _stamp(line: str) -> datetime:
    return datetime.strptime(line.split(" INFO ")[0].strip()[:23], "%Y-%m-%d %H:%M:%S,%f")


def _after_search_seconds(run: Path) -> float:
    """From the last tell's last line to the report's last line: what the sweep spends after its search."""
    last_tell = max(_stamp(log.read_text().strip().splitlines()[-1]) for log in run.glob("logs/rounds/*/*/tell.log"))
    report = _stamp((run / "logs" / "report.log").read_text().strip().splitlines()[-1])
    return (report - last_tell).total_seconds()


def median_run(data: dict, aic_cache: str | None = None) -> tuple[dict, list[float]]:
    runs = sorted((sweep(data, aic_cache) for _ in range(RUNS)), key=lambda r: r["wall"])
    return runs[len(runs) // 2], [r["wall"] for r in runs]


def default_config() -> dict:
    return yaml.safe_load((REPO / "config" / "default.yaml").read_text())


def bench_default() -> None:
    print("| sweep | aiconfigurator's answer | trials | wall, median of 3 (s) | runs (s) | before round 0 (s) "
          "| warm-up, sum over jobs (s) | replays, sum (s) | optimizer (s) |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|")
    no_stress = default_config()
    no_stress["sweep"]["stress_top"] = 0
    with tempfile.TemporaryDirectory() as shared:
        sweep(default_config(), shared)  # fills the shared cache: later runs find aiconfigurator's answer
        variants = (
            ("searched (first run)", None, default_config()),
            ("cached", shared, default_config()),
            ("cached, no stress test (`sweep.stress_top: 0`)", shared, no_stress),
        )
        for label, cache, data in variants:
            run, walls = median_run(data, cache)
            warm, replays = sum(run["warm_up"]), sum(t["wall_seconds"] for t in run["trials"])
            optimizer = run["summary"]["optimizer_seconds"]
            print(
                f"| default.yaml | {label} | {len(run['trials'])} | {run['wall']:.1f} "
                f"| {', '.join(f'{w:.1f}' for w in walls)} | {run['setup']:.1f} | {warm:.1f} ({len(run['warm_up'])} jobs) "
                f"| {replays:.1f} | {optimizer:.2f} |"
            )


def p1_config() -> dict:
    data = default_config()
    data["search_space"] = narrowed(data["search_space"], router_mode=["round_robin"])
    data["search_space"] = narrowed(data["search_space"], planner_scaling_policy=["disabled"])
    data["workload"] = {"trace_path": str(REPO / "data" / "traces" / "mooncake_synthetic_trace.jsonl")}
    data["goal"] = {"target": "goodput_per_gpu", "sla": {"ttft_ms": 3000, "itl_ms": 40}}
    data["search_space"] = narrowed(data["search_space"], deployment_mode=["agg"])
    # No prefix screen: P1 measures overhead around replays that run in full (at full speed this trace
    # overloads every layout, and the screen would stop each one on its prefix).
    data["sweep"].update(max_rounds=8, candidates_per_round=4, max_eval_seconds=300, seed=1, screen_fraction=None)
    return data


def p1_long_config() -> dict:
    """The same sweep shape on longer replays: 24,000 synthetic requests each (about 2 s warm)."""
    data = p1_config()
    data["workload"] = {"isl": 2048, "osl": 256, "request_rate": 8.0, "num_request_ratio": 3000}
    return data


def p1_in_flight_config() -> dict:
    """The trace sweep with 2 rounds in flight: a round's slowest replay no longer idles the other core."""
    data = p1_config()
    data["sweep"]["rounds_in_flight"] = 2
    return data


def bench_p1() -> None:
    print("| sweep | trials | wall, median of 3 (s) | runs (s) | search replay CPU (s) | after the search: finish / "
          "stress / baselines / capacity CPU (s) | P1 over the search's replays | P1 over every replay |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|")
    for name, data in (
        ("trace (3,993 requests), agg, 8 rounds x 4", p1_config()),
        ("trace (3,993 requests), agg, 8 rounds x 4, 2 in flight", p1_in_flight_config()),
        ("synthetic (24,000 requests), agg, 8 rounds x 4", p1_long_config()),
    ):
        run, walls = median_run(data)
        cpu = sum(t["cpu_seconds"] for t in run["trials"])
        after = run["post_search_cpu"]
        print(
            f"| {name} | {len(run['trials'])} | {run['wall']:.1f} | {', '.join(f'{w:.1f}' for w in walls)} "
            f"| {cpu:.1f} | {' / '.join(f'{v:.1f}' for v in after.values())} | {run['wall'] * CORES / cpu:.2f} "
            f"| {run['wall'] * CORES / (cpu + sum(after.values())):.2f} |"
        )


def conversation_config() -> dict:
    """Issue 40's real-trace sweep: the default space (agg + disagg, vLLM + SGLang, both routers) on the 12,031-request
    conversation-shaped trace of bench/conversation_trace.py, 3 rounds x 4, everything after the search on."""
    from conversation_trace import conversation_trace

    data = default_config()
    data["workload"] = {"trace_path": str(conversation_trace())}
    data["sweep"].update(max_rounds=3, candidates_per_round=4)
    return data


def bench_conversation() -> None:
    print("| sweep | aiconfigurator's answer | trials | wall, median of 3 (s) | runs (s) | search: start to the last "
          "tell (s) | after it (s) | search replay CPU (s) | finish / stress / baselines / capacity CPU (s) | of which "
          "replayed ahead by finish shares, during the search (CPU s) |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|")
    data = conversation_config()
    with tempfile.TemporaryDirectory() as shared:
        # A first run searches aiconfigurator's answer (the first of these fills the shared cache); then cached.
        searched = [sweep(data, shared)] + [sweep(data) for _ in range(RUNS - 1)]
        cached = [sweep(data, shared) for _ in range(RUNS)]
    name = "conversation trace (12,031 requests), default space, 3 rounds x 4"
    for label, runs in (("searched (first run)", searched), ("cached", cached)):
        runs = sorted(runs, key=lambda r: r["wall"])
        run, walls = runs[len(runs) // 2], [r["wall"] for r in runs]
        search, after = run["wall"] - run["after_search"], run["after_search"]
        cpu = " / ".join(f"{v:.1f}" for v in run["post_search_cpu"].values())
        print(f"| {name} | {label} | {len(run['trials'])} | {run['wall']:.1f} | {', '.join(f'{w:.1f}' for w in walls)} "
              f"| {search:.1f} | {after:.1f} | {sum(t['cpu_seconds'] for t in run['trials']):.1f} | {cpu} "
              f"| {run['ahead_cpu']:.1f} |")  # fmt: skip


LEAN_VARIANTS = (
    ("defaults", {}),
    ("`sweep.finish_top: 3` (the finish ranks the top_k the report shows)", {"finish_top": 3}),
    ("`finish_top: 3`, `stress_top: 0` (no stress test)", {"finish_top": 3, "stress_top": 0}),
)


def variant_runs(variants):
    """Each variant of the conversation sweep (its label, its sweep settings, its median run of RUNS and their
    walls), aiconfigurator's answer cached (a first sweep fills the cache and is not counted)."""
    with tempfile.TemporaryDirectory() as shared:
        sweep(conversation_config(), shared)
        for label, settings in variants:
            data = conversation_config()
            data["sweep"].update(settings)
            runs = sorted((sweep(data, shared) for _ in range(RUNS)), key=lambda r: r["wall"])
            yield label, runs[len(runs) // 2], [r["wall"] for r in runs]


def recommended(run: dict, field: str) -> str:
    best = next((f for f in run["summary"].get("finish") or [] if f.get("recommended")), None)
    return f"{best['key'][:12]}, {best[field]:.1f}" if best else "(no finish)"


def bench_conversation_lean() -> None:
    """What the work after the search costs on the real-trace sweep, by the settings that size it: the same sweep
    (aiconfigurator's answer cached) with its defaults, with the finish's top cut to the report's top_k, and with
    the stress test off too; the three side by side, each the median of 3, and what each recommends."""
    print("| sweep settings | trials | wall, median of 3 (s) | runs (s) | search: start to the last tell (s) | after it "
          "(s) | search replay CPU (s) | finish / stress / baselines / capacity CPU (s) | recommended (key, search "
          "score) |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|")
    for label, run, walls in variant_runs(LEAN_VARIANTS):
        cpu = " / ".join(f"{v:.1f}" for v in run["post_search_cpu"].values())
        print(f"| {label} | {len(run['trials'])} | {run['wall']:.1f} | {', '.join(f'{w:.1f}' for w in walls)} "
              f"| {run['wall'] - run['after_search']:.1f} | {run['after_search']:.1f} "
              f"| {sum(t['cpu_seconds'] for t in run['trials']):.1f} | {cpu} "
              f"| {recommended(run, 'search_score')} |", flush=True)  # fmt: skip


SAMPLE_VARIANTS = (
    ("defaults (the whole trace searched)", {}),
    ("`sweep.search_sample: auto` (a 2,000-request stratified sample searched, the finish on the whole trace)",
     {"search_sample": "auto"}),
)


def bench_conversation_sample() -> None:
    """The real-trace sweep searched on the whole trace and on its sample, side by side, each the median of 3, with
    what each recommends (its key, its finish statistic on the whole trace)."""
    print("| sweep settings | trials | wall, median of 3 (s) | runs (s) | search: start to the last tell (s) | after it "
          "(s) | recommended (key, fresh statistic on the whole trace) |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    for label, run, walls in variant_runs(SAMPLE_VARIANTS):
        print(f"| {label} | {len(run['trials'])} | {run['wall']:.1f} | {', '.join(f'{w:.1f}' for w in walls)} "
              f"| {run['wall'] - run['after_search']:.1f} | {run['after_search']:.1f} "
              f"| {recommended(run, 'statistic')} |", flush=True)  # fmt: skip


def rounds_config(rounds: int) -> dict:
    data = default_config()
    data["search_space"] = narrowed(data["search_space"], deployment_mode=["agg"])
    data["workload"]["num_request_ratio"] = 5  # 40 requests: about 0.05 s per replay
    data["sweep"].update(max_rounds=rounds, candidates_per_round=2, seed=2)
    return data


def bench_rounds() -> None:
    short, short_walls = median_run(rounds_config(2))
    long, long_walls = median_run(rounds_config(8))
    replays = [sum(t["wall_seconds"] for t in r["trials"]) for r in (short, long)]
    per_round = ((long["wall"] - replays[1]) - (short["wall"] - replays[0])) / 6
    print("| rounds | trials | wall, median of 3 (s) | runs (s) | replays, sum (s) |")
    print("|---|---|---|---|---|")
    for rounds, run, walls, seconds in ((2, short, short_walls, replays[0]), (8, long, long_walls, replays[1])):
        print(
            f"| {rounds} | {len(run['trials'])} | {run['wall']:.1f} | {', '.join(f'{w:.1f}' for w in walls)} | {seconds:.2f} |"
        )
    print(f"\nper-round overhead (wall minus replays, per extra round): {per_round:.1f} s")


if __name__ == "__main__":
    for name in sys.argv[1:] or ["default", "p1", "rounds"]:
        {"default": bench_default, "p1": bench_p1, "rounds": bench_rounds, "conversation": bench_conversation,
         "conversation-lean": bench_conversation_lean, "conversation-sample": bench_conversation_sample}[name]()
        print(flush=True)
