"""Benchmark: day-scale traces. A replay's wall time and peak memory at 12k, 100k and 500k requests.

The traces: a day (24 h) of arrivals whose rate follows a diurnal curve (lowest at 04:00, highest at
16:00, peak / trough = 4), each request's lengths and KV blocks drawn from the shipped Mooncake trace
(data/traces/mooncake_synthetic_trace.jsonl) with a fixed seed. A block the source shares between
records keeps its id in every copy, and a block of one record gets a fresh id per copy, so prefix
reuse keeps the source's structure. They are written under `$SPICA_BENCH_CACHE` (default
~/.cache/spica/bench/day-traces), named by the source's hash, the request count, the seed and this
generator's version, and reused while those match.

Per trace:
- the scan (`scan_trace`: parse every line and hash the file), once in a fresh process, the cost a
  job pays when it reads the trace itself;
- one replay of one deployment, in a child process of its own, median of 3: its wall time and its
  peak resident memory (from `wait4`). The deployment is Qwen3-32B on H200, vLLM, aggregated,
  `REPLICAS` x TP1 engines, round robin, no planner, sized so the 500k trace's busiest hour is
  served. The same deployment replays every trace.
Peak memory grows with the trace's input tokens (the replay keeps every request's token ids), so a
line through the replayed rows gives MiB per input token; a trace the line says this machine cannot
hold is not replayed (the kernel's OOM killer would end it) and its row says what it would need.

Run: .venv/bin/python bench/day_trace.py [--counts 12000,100000,500000] [--runs 3]
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("DYN_LOG", "error")
REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

SOURCE = REPO / "data" / "traces" / "mooncake_synthetic_trace.jsonl"
GENERATOR_VERSION = 1
DAY_MS = 86_400_000.0
PEAK_TO_TROUGH = 4.0
SEED = 7
REPLICAS = 16
CANDIDATE = {"deployment_mode": "agg", "backend": "vllm", "router_mode": "round_robin",
             "planner_scaling_policy": "disabled", "parallel": {"tp": 1, "replicas": REPLICAS}}  # fmt: skip


def day_trace(count: int) -> Path:
    """The day-shaped trace of `count` requests (generated once per source, count, seed and version)."""
    source = SOURCE.read_bytes()
    name = f"day-{hashlib.sha256(source).hexdigest()[:12]}-{count}-s{SEED}-v{GENERATOR_VERSION}.jsonl"
    folder = Path(os.environ.get("SPICA_BENCH_CACHE", Path.home() / ".cache" / "spica" / "bench")) / "day-traces"
    path = folder / name
    if path.is_file():
        return path
    folder.mkdir(parents=True, exist_ok=True)
    records = [json.loads(line) for line in source.decode().splitlines() if line.strip()]
    uses: dict[int, int] = {}
    for record in records:
        for block in record["hash_ids"]:
            uses[block] = uses.get(block, 0) + 1
    fresh = max(uses) + 1
    rng = random.Random(SEED)
    with tempfile.NamedTemporaryFile("w", dir=folder, delete=False, suffix=".tmp") as handle:
        for stamp in _arrivals(count, rng):
            record = rng.choice(records)
            blocks = []
            for block in record["hash_ids"]:
                if uses[block] > 1:
                    blocks.append(block)
                else:
                    blocks.append(fresh)
                    fresh += 1
            handle.write(json.dumps({"timestamp": round(stamp, 3), "input_length": record["input_length"],
                                     "output_length": record["output_length"], "hash_ids": blocks}) + "\n")  # fmt: skip
    os.replace(handle.name, path)
    return path


def _arrivals(count: int, rng: random.Random) -> list[float]:
    """`count` sorted arrival times over a day, drawn from the diurnal rate by inverting its integral."""
    amplitude = (PEAK_TO_TROUGH - 1) / (PEAK_TO_TROUGH + 1)  # rate ∝ 1 + a·sin(...), peak/trough = (1+a)/(1-a)
    phase = 2 * math.pi * (16 / 24 - 0.25)  # the sine's top at 16:00

    def integral(t: float) -> float:  # ∫0^t (1 + a·sin(2πs/D − φ')) ds, in units of the mean rate
        w = 2 * math.pi / DAY_MS
        return t - amplitude / w * (math.cos(w * t - phase) - math.cos(-phase))

    out = []
    for u in sorted(rng.random() for _ in range(count)):
        target, low, high = u * DAY_MS, 0.0, DAY_MS
        for _ in range(40):  # bisection: the integral is increasing
            middle = (low + high) / 2
            low, high = (middle, high) if integral(middle) < target else (low, middle)
        out.append(low)
    return out


def replay_call(trace: Path) -> dict:
    import yaml

    from spica_lib.cli.candidate import candidate_selection
    from spica_lib.config import SmartSearchConfig
    from spica_lib.config.narrow import narrowed
    from spica_lib.facts.catalog import resolve_backend_version
    from spica_lib.replay.request import replay_call as plain_call
    from spica_lib.trial.evaluate import prepare_trial

    data = yaml.safe_load((REPO / "config" / "default.yaml").read_text())
    data["search_space"] = narrowed({**data["search_space"], "gpu_budget": REPLICAS}, deployment_mode=["agg"],
                                    backend=["vllm"], router_mode=["round_robin"], planner_scaling_policy=["disabled"])
    data["workload"] = {"trace_path": str(trace)}
    data["goal"] = {"target": "goodput_per_gpu", "sla": {"ttft_ms": 3000, "itl_ms": 60}}
    data["sweep"] = {**data.get("sweep", {}), "screen_fraction": None, "baselines": False}
    config = SmartSearchConfig.from_mapping(data)
    selection, layout = candidate_selection(config, CANDIDATE)
    spec = prepare_trial(config, selection, layout, backend_version=resolve_backend_version("h200_sxm", "vllm"))
    return {**plain_call(spec.replay), "screen": None, "pace": None}


def measure_replay(call_path: Path) -> tuple[float, float, dict]:
    """One replay in a child of its own: (wall seconds, peak RSS in MiB, headline metrics)."""
    out = call_path.with_suffix(".out.json")
    started = time.perf_counter()
    child = subprocess.Popen([sys.executable, __file__, "--child", str(call_path), str(out)])
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - started
    if status != 0:
        raise SystemExit(f"the replay child failed (status {status}, peak RSS {usage.ru_maxrss / 1024:.0f} MiB)")
    metrics = json.loads(out.read_text())
    return wall, usage.ru_maxrss / 1024, metrics


def memory_fit(rows: list[tuple[int, float]]) -> tuple[float, float]:
    """(MiB at no tokens, bytes per input token): a least-squares line through (input tokens, peak MiB)."""
    n = len(rows)
    mean_x, mean_y = sum(x for x, _ in rows) / n, sum(y for _, y in rows) / n
    slope = sum((x - mean_x) * (y - mean_y) for x, y in rows) / sum((x - mean_x) ** 2 for x, _ in rows)
    return mean_y - slope * mean_x, slope * 2**20


def measure_scan(trace: Path) -> float:
    code = ("import sys,time; sys.path.insert(0, sys.argv[2]); from spica_lib.traces.scan import scan_trace; "
            "t=time.perf_counter(); scan_trace(sys.argv[1]); print(time.perf_counter()-t)")  # fmt: skip
    done = subprocess.run([sys.executable, "-c", code, str(trace), str(REPO)], capture_output=True, text=True,
                          check=True)  # fmt: skip
    return float(done.stdout.strip().splitlines()[-1])


def child(call_path: str, out_path: str) -> None:
    from spica_lib.replay.call import execute_call

    outcome = execute_call(json.loads(Path(call_path).read_text()))
    keep = ("completed_requests", "mean_ttft_ms", "p99_ttft_ms", "mean_itl_ms", "output_throughput_tok_s")
    Path(out_path).write_text(json.dumps({k: outcome["metrics"].get(k) for k in keep}))


def main() -> None:
    args = sys.argv[1:]
    if args[:1] == ["--child"]:
        child(args[1], args[2])
        return
    counts = [int(c) for c in (args[args.index("--counts") + 1] if "--counts" in args else "12000,100000,500000").split(",")]
    runs = int(args[args.index("--runs") + 1]) if "--runs" in args else 3
    print(f"Qwen3-32B on H200, vLLM agg, {REPLICAS} x TP1, round robin; each replay in its own child, "
          f"median of {runs}\n")
    print("| requests | input tokens (M) | trace MiB | scan (s) | replay wall, median (s) | runs (s) "
          "| peak RSS, max (MiB) | completed | mean TTFT (ms) | mean ITL (ms) |")
    print("|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|")
    measured: list[tuple[int, float]] = []  # (input tokens, peak MiB)
    with tempfile.TemporaryDirectory(prefix="spica-day-trace-") as folder:
        for count in counts:
            trace = day_trace(count)
            scan = measure_scan(trace)
            tokens = scan_tokens(trace)
            if len(measured) >= 2:  # a replay that cannot fit is not started: the kernel would kill it
                base, per_token = memory_fit(measured)
                need = base + per_token * tokens / 2**20
                if need > available_mib():
                    print(f"| {count:,} | {tokens / 1e6:,.0f} | {trace.stat().st_size / 2**20:.0f} | {scan:.1f} "
                          f"| not run: needs about {need / 1024:.1f} GiB by the fit below, this machine has "
                          f"{available_mib() / 1024:.1f} GiB free | | | | | |", flush=True)
                    continue
            call_path = Path(folder) / f"{count}.json"
            call_path.write_text(json.dumps(replay_call(trace)))
            walls, peaks, metrics = [], [], {}
            for _ in range(runs):
                wall, peak, metrics = measure_replay(call_path)
                walls.append(wall)
                peaks.append(peak)
            measured.append((tokens, max(peaks)))
            print(f"| {count:,} | {tokens / 1e6:,.0f} | {trace.stat().st_size / 2**20:.0f} | {scan:.1f} "
                  f"| {statistics.median(walls):.1f} | "
                  f"{', '.join(f'{w:.1f}' for w in sorted(walls))} | {max(peaks):.0f} | "
                  f"{int(metrics.get('completed_requests') or 0):,} | {metrics.get('mean_ttft_ms') or 0:.0f} | "
                  f"{metrics.get('mean_itl_ms') or 0:.1f} |", flush=True)
    if len(measured) >= 2:
        base, per_token = memory_fit(measured)
        print(f"\nPeak RSS fit over the replayed rows: {base:.0f} MiB + {per_token:.2f} bytes per input token")


def scan_tokens(trace: Path) -> int:
    from spica_lib.traces.scan import scan_trace

    return scan_trace(trace).input_tokens


def available_mib() -> float:
    import psutil

    return psutil.virtual_memory().available / 2**20


if __name__ == "__main__":
    main()
