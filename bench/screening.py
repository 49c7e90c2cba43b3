"""Benchmark: early stops (issue 38). Does any stop drop a deployment that would have scored?

Three sweeps, each run once from scratch with the default early stops (docs/trials.md, "Early stops"):

- **trace example**: `config/examples/trace.yaml` as shipped (the shipped Mooncake-format trace, 16 H200,
  agg + disagg, vLLM, both routers, planner policies, goodput per GPU under TTFT 3 s / ITL 40 ms);
- **conversation**: the conversation-shaped trace of `bench/conversation_trace.py` (12,031 requests over
  an hour, seed 0), Qwen3-32B on 16 H200, agg + disagg, vLLM + SGLang, both routers, goodput per GPU
  under mean TTFT <= 5 s and ITL <= 50 ms, 3 rounds x 4 per branch (the issue's sweep);
- **overload**: the default config's space at 3x its load (24 req/s, 720 requests) with a hard p90 SLA
  (TTFT <= 2 s, ITL <= 50 ms) and goodput per GPU: most layouts drown.

The baselines, stress test and capacity are off, and the finish too but for the trace example (whose
held-out quarter needs it): none of them is a search trial, and their replays would only lengthen the run. Then every stopped trial (pruned, certain to miss,
or stalled) is replayed in full with no early stop, its limit raised to `FULL_LIMIT_SECONDS`:

- **false stop**: it was feasible in full (a stall is a time limit: a false stop only says the limit
  cost the search a candidate; a certain miss must never be one);
- **harmful stop**: in full it would have ranked in the sweep's top k (k = 5, the prune rule's k):
  its full score beats the k-th row of ranked.csv;
- **time saved**: the full replays' wall minus the stopped replays' wall (the stops' own cost included).

Printed: one row per sweep. Walls are one run each on whatever machine runs it: re-measure them on a
quiet one; the counts do not depend on the machine's load (a stall's does: it is a CPU-time limit).

Run: .venv/bin/python bench/screening.py [--sweeps trace,conversation,overload] [--rounds N]
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pandas as pd
import yaml

os.environ.setdefault("DYN_LOG", "error")
REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from conversation_trace import conversation_trace  # noqa: E402
from timed_sweep import timed_sweep  # noqa: E402

from spica_lib.trial.evaluate import evaluate_trial  # noqa: E402
from spica_lib.trial.spec import TrialRecord  # noqa: E402

CORES = 2
TOP = 5
FULL_LIMIT_SECONDS = 600.0
OFF = {"finish_samples": 0, "baselines": False, "stress_top": 0, "capacity_top": 0}


def trace_example(rounds: int | None) -> dict:
    data = yaml.safe_load((REPO / "config" / "examples" / "trace.yaml").read_text())
    data["workload"]["trace_path"] = str((REPO / "config" / "examples" / data["workload"]["trace_path"]).resolve())
    data["sweep"].update({k: v for k, v in OFF.items() if k != "finish_samples"})  # its holdout needs the finish
    if rounds:
        data["sweep"]["max_rounds"] = rounds
    return data


def conversation(rounds: int | None) -> dict:
    data = yaml.safe_load((REPO / "config" / "default.yaml").read_text())
    data["search_space"]["gpu_budget"] = 16
    data["workload"] = {"trace_path": str(conversation_trace(12031, 0))}
    data["goal"] = {"target": "goodput_per_gpu", "sla": {"ttft_ms": 5000, "itl_ms": 50}}
    data["sweep"] = {"max_rounds": rounds or 3, "candidates_per_round": 4, "parallel_evals": 2, "seed": 0, **OFF}
    return data


def overload(rounds: int | None) -> dict:
    data = yaml.safe_load((REPO / "config" / "default.yaml").read_text())
    data["workload"]["request_rate"] = 24.0
    data["goal"] = {"target": "goodput_per_gpu", "sla": {"ttft_ms": 2000, "itl_ms": 50, "percentile": 90}}
    data["sweep"].update({"max_rounds": rounds or 3, **OFF})
    return data


SWEEPS = {"trace": ("trace example", trace_example), "conversation": ("conversation", conversation),
          "overload": ("overload", overload)}  # fmt: skip


def stopped(result: dict) -> str | None:
    """The rule that stopped a trial early, or None."""
    if result.get("stop"):
        return result["stop"]["rule"]
    if result["status"] == "timed_out" and (result.get("reason") or "").startswith("stalled"):
        return "stalled"
    return None


def judge(run: Path) -> dict:
    """Replay every stopped trial of the run in full; count false and harmful stops and the time saved."""
    ranked = pd.read_csv(run / "ranked.csv") if (run / "ranked.csv").is_file() else pd.DataFrame({"score": []})
    scores = sorted(ranked["score"], reverse=True)
    kth = scores[TOP - 1] if len(scores) >= TOP else float("-inf")
    records = {}
    for path in run.glob("rounds/*/*/trials/*/*.json"):
        record = TrialRecord.model_validate_json(path.read_text())
        records[record.key] = record
    rows = []
    for key, record in records.items():
        rule = stopped(record.result.model_dump(mode="json"))
        if rule is None:
            continue
        spec = record.spec.model_copy(update={"replay": record.spec.replay.model_copy(update={"screen": None})})
        started = time.perf_counter()
        full = evaluate_trial(spec, max_eval_seconds=FULL_LIMIT_SECONDS)
        rows.append({"key": key, "rule": rule, "stopped_wall": record.result.wall_seconds,
                     "full_wall": time.perf_counter() - started, "full_status": full.status, "full_score": full.score,
                     "harmful": full.status == "feasible" and full.score is not None and full.score > kth})  # fmt: skip
    trials = [r.result for r in records.values()]
    return {"trials": len(trials), "rows": rows, "kth": kth, "best": scores[0] if scores else None,
            "replay_wall": sum(t.wall_seconds for t in trials)}  # fmt: skip


def row(name: str, wall: float, found: dict) -> str:
    rows = found["rows"]
    by_rule: dict[str, int] = {}
    for r in rows:
        by_rule[r["rule"]] = by_rule.get(r["rule"], 0) + 1
    unfinished = sum(r["full_status"] == "timed_out" for r in rows)
    false = sum(r["full_status"] == "feasible" for r in rows)
    false_sound = sum(r["full_status"] == "feasible" and r["rule"] in ("percentile", "coverage") for r in rows)
    harmful = sum(r["harmful"] for r in rows)
    saved = sum(r["full_wall"] - r["stopped_wall"] for r in rows)
    rules = ", ".join(f"{rule} {count}" for rule, count in sorted(by_rule.items())) or "none"
    kth = f"{found['kth']:.4g}" if found["kth"] != float("-inf") else "—"
    return (f"| {name} | {found['trials']} | {len(rows)} ({rules}) | {false} ({false_sound}) | {harmful} | "
            f"{unfinished} | {kth} | {wall:.0f} | {found['replay_wall']:.0f} | {saved:.0f} |")  # fmt: skip


def main() -> None:
    args = sys.argv[1:]
    chosen = args[args.index("--sweeps") + 1].split(",") if "--sweeps" in args else list(SWEEPS)
    rounds = int(args[args.index("--rounds") + 1]) if "--rounds" in args else None
    print(f"| sweep | trials | stopped early (by rule) | false stops: feasible in full (of them certain misses) "
          f"| harmful: in the top {TOP} in full | full replay past {FULL_LIMIT_SECONDS:.0f} s | #{TOP} score "
          "| sweep wall (s) | replays' wall, sum (s) | time the stops saved (s) |")  # fmt: skip
    print("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|")
    for name in chosen:
        label, make = SWEEPS[name]
        wall, found = timed_sweep(make(rounds), CORES, judge, allowed=(0, 1))
        print(row(label, wall, found), flush=True)
        if "--details" in args:
            print(json.dumps(found["rows"], indent=1), flush=True)


if __name__ == "__main__":
    main()
