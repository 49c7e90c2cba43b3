"""How far a replay's full cost runs past what its prefix predicted, and what the pace limit's factor stops.

The pace limit (spica_lib/replay/stall.py) gives the rest of a replay `STALL_FACTOR` times what its
prefix's pace predicts. A false time-out is a replay that limit stops although it would have finished
within `max_eval_seconds`. For each trace, this runs the default space's sweep (3 rounds x 4, as
bench/sweep_overhead.py's `conversation`) with the factor as it is, and reads every search replay that
reached its pace checkpoint: its ratio, full CPU / (prefix CPU / prefix fraction). Then every replay the
factor stopped is replayed again with the factor at 10 (the old value) and the sweep's own limit: one
that finishes there was a false time-out, and its score says whether it would have ranked in the
sweep's top 5.

Traces: the shipped Mooncake-style trace (3,993 requests) and the 12,031-request conversation trace of
bench/conversation_trace.py (seed 0).

Run: .venv/bin/python bench/pace_ratio.py   (about 15 minutes on 2 cores)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from conversation_trace import conversation_trace  # noqa: E402
from sweep_overhead import CORES, REPO, default_config  # noqa: E402

from spica_lib.replay import stall  # noqa: E402
from spica_lib.trial.evaluate import evaluate_trials  # noqa: E402
from spica_lib.trial.spec import TrialRecord  # noqa: E402

OLD_FACTOR = 10.0
TOP = 5


def traces() -> list[tuple[str, str]]:
    return [
        ("shipped Mooncake-style (3,993 requests)", str(REPO / "data" / "traces" / "mooncake_synthetic_trace.jsonl")),
        ("conversation (12,031 requests)", str(conversation_trace())),
    ]


def sweep_records(trace: str) -> tuple[list[TrialRecord], float]:
    """Every search trial of one sweep on `trace`, and its max_eval_seconds."""
    data = default_config()
    data["workload"] = {"trace_path": trace}
    data["sweep"].update(max_rounds=3, candidates_per_round=4)
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        (folder / "spica.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
        env = {**os.environ, "SPICA_AIC_CACHE": str(folder / "aic-cache")}
        done = subprocess.run([sys.executable, "-m", "spica_lib.cli", "run", "spica.yaml", "--cores", str(CORES)],
                              cwd=folder, env=env, capture_output=True, text=True, check=False)  # fmt: skip
        if done.returncode != 0:
            raise SystemExit(done.stderr[-3000:])
        run = next((folder / "results").iterdir())
        limit = json.loads((run / "config.json").read_text())["config"]["sweep"]["max_eval_seconds"]
        records = [TrialRecord.model_validate_json(p.read_text()) for p in run.glob("rounds/*/*/trials/*/*.json")]
    return records, float(limit)


def ratio(record: TrialRecord) -> float | None:
    checkpoint, screen = record.result.checkpoint, record.spec.replay.screen
    if checkpoint is None or screen is None or checkpoint.cpu_seconds <= 0:
        return None
    return record.result.cpu_seconds / (checkpoint.cpu_seconds / screen.fraction)


def paced_out(record: TrialRecord) -> bool:
    return record.result.status == "timed_out" and "the full replay ran past" in (record.result.reason or "")


def main() -> None:
    factor = stall.STALL_FACTOR
    print(f"pace factor now: {factor:g}x; replays it stopped are replayed again at {OLD_FACTOR:g}x\n")
    print("| trace | replays with a checkpoint | ran to their end: max ratio | stopped by the pace limit "
          f"| at {OLD_FACTOR:g}x: finished (false time-outs) | at {OLD_FACTOR:g}x: stopped again "
          f"| false time-outs in the sweep's top {TOP} |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    for name, trace in traces():
        records, limit = sweep_records(trace)
        paced = [r for r in records if ratio(r) is not None]
        ended = [ratio(r) for r in paced if r.result.status in ("feasible", "infeasible")]
        stopped = [r for r in paced if paced_out(r)]
        scores = sorted((r.result.score for r in records if r.result.score is not None), reverse=True)
        bar = scores[TOP - 1] if len(scores) >= TOP else float("-inf")
        stall.STALL_FACTOR = OLD_FACTOR  # read by the worker in this process when it paces a child
        try:
            again = dict(evaluate_trials({r.key: r.spec for r in stopped}, max_eval_seconds=limit, parallel=CORES))
        finally:
            stall.STALL_FACTOR = factor
        finished = [result for result in again.values() if result.status in ("feasible", "infeasible")]
        ranked = [result for result in finished if result.score is not None and result.score >= bar]
        print(f"| {name} | {len(paced)} | {max(ended, default=float('nan')):.2f} | {len(stopped)} "
              f"| {len(finished)} | {len(stopped) - len(finished)} | {len(ranked)} |")  # fmt: skip
        for r in stopped:
            result = again[r.key]
            print(f"  {r.key[:12]}: at {factor:g}x {r.result.cpu_seconds:.1f} CPU s; at {OLD_FACTOR:g}x "
                  f"{result.status} after {result.cpu_seconds:.1f} CPU s ({(result.reason or '')[:90]})")  # fmt: skip


if __name__ == "__main__":
    main()
