"""Benchmark: a deployment started live (Dynamo's frontend, router and mocker workers) against its replay
(docs/benchmarks/rehearsal.md).

Runs the default sweep (`spica run config/default.yaml`, in a scratch folder kept between runs: --workdir), then
rehearses on this machine its top 3 and the best agg deployment with the KV router (written to a scratch deploy
folder the way the deploy stage writes rank folders), each at speed-up 1 (real time) and, if given, at --speedup (the
mocker's steps and the arrivals that much faster), on the default sample (240 requests). Prints, per deployment
and speed-up, the rehearsal's verdict, every compared metric replayed and live and their difference, the closed
loop's tok/s at the in-flight count the replay carried, how busy the machine's CPUs were, and the wall time to
ready and of the traffic.

Run: .venv/bin/python bench/rehearsal.py [--speedup 4] [--workdir /tmp/spica-bench-rehearsal]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from spica_lib.rehearsal.rehearse import rehearse  # noqa: E402
from spica_lib.deploy.top import write_deployment  # noqa: E402
from spica_lib.run.view import RunView  # noqa: E402


def finished_default_run(workdir: Path) -> Path:
    workdir.mkdir(parents=True, exist_ok=True)
    done = subprocess.run([sys.executable, "-m", "spica_lib.cli", "run", str(REPO / "config" / "default.yaml")],
                          cwd=workdir, capture_output=True, text=True, check=False)  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(done.stderr[-2000:])
    return next((workdir / "results").iterdir())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--speedup", type=float, default=None, help="also rehearse at this speed-up (default: 1 only)")
    parser.add_argument("--workdir", default="/tmp/spica-bench-rehearsal")
    args = parser.parse_args()
    speedups = [1.0] + ([args.speedup] if args.speedup else [])
    run = finished_default_run(Path(args.workdir))
    view = RunView(run)
    scratch = run / "bench-rehearsal"
    cases = []
    for rank, row in enumerate(view.ranked[:3], start=1):
        cases.append((f"#{rank}", rank, write_deployment(scratch / str(rank), rank, view.records[row.key], view.config,
                                                         run=view.validated.run)))  # fmt: skip
    kv = next(r for r in view.ranked if r.branch == "agg" and r.candidate.config.get("router_mode") == "kv_router")
    cases.append(("best agg, KV router", 4, write_deployment(scratch / "4", 4, view.records[kv.key], view.config,
                                                             run=view.validated.run)))  # fmt: skip
    metrics = ("ttft_mean_ms", "ttft_p90_ms", "itl_mean_ms", "itl_p90_ms", "output_tok_s", "sla_share")
    print("| deployment | speed-up | verdict | ready s | traffic s | CPUs busy (open, closed) | "
          + " | ".join(f"{m}: replay / live / diff" for m in metrics) + " | closed-loop tok/s: in flight, replay / "
          "live / diff |")  # fmt: skip
    print("|---|---:|---|---:|---:|---|" + "---|" * (len(metrics) + 1))
    for label, rank, files in cases:
        for speedup in speedups:
            found = rehearse(scratch, rank, "local", speedup=speedup)
            cells = []
            for name in metrics:
                replay, live = getattr(found.replay, name), getattr(found.live, name)
                diff = found.differences.get(name)
                unit = " pt" if name == "sla_share" else " %"
                cells.append(f"{replay:.4g} / {live:.4g} / {'—' if diff is None else f'{100 * diff:+.1f}{unit}'}")
            closed_replay, closed_live = found.closed_replay.output_tok_s, found.closed_live.output_tok_s
            cells.append(f"{found.closed_in_flight}, {closed_replay:.4g} / {closed_live:.4g} / "
                         f"{100 * (closed_live - closed_replay) / closed_replay:+.1f} %")  # fmt: skip
            busy = ", ".join(f"{100 * m.busy_share:.0f} %" for m in found.machine)
            print(f"| {label}: {files.deployment} | {speedup:g} | {found.verdict} | {found.ready_seconds:.1f} | "
                  f"{found.live_seconds:.1f} | {busy} | " + " | ".join(cells) + " |", flush=True)  # fmt: skip

if __name__ == "__main__":
    main()
