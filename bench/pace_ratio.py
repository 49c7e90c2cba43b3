"""Which replays the time limits stop, and whether any of them would have finished.

Three limits stop a replay for its time before `max_eval_seconds` (spica_lib/replay/stall.py and
progress.py), each recorded `timed_out`:
- the pace limit: the rest of a replay gets `STALL_FACTOR` times what its prefix's pace predicts (and a replay
  whose pace since its prefix, kept up, would overrun that is stopped at once);
- the round's prefix budget: from round 1, a prefix gets `PREFIX_FACTOR` times the slowest prefix the sweep
  told before the round (at least the stall floor) instead of its share of `max_eval_seconds`;
- stuck: a replay that makes no tick for `STUCK_FACTOR` times its slowest tick (at least the floor).
A false time-out is a replay one of them stops although it would have finished within `max_eval_seconds`.
For each trace, this runs the default space's sweep (3 rounds x 4, as bench/sweep_overhead.py's
`conversation`) with the limits as they are, and reads every search replay that reached its pace
checkpoint: its ratio, full CPU / (prefix CPU / prefix fraction). Then every replay a limit stopped is
replayed again without those three (the pace factor at 10, the old value; no prefix budget; never stuck)
under the sweep's own limit: one that finishes there was a false time-out, and its score says whether it
would have ranked in the sweep's top 5.

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


LIMITS = {  # what each limit's reason says: the pace limit from outside, or its forecast from the ticks
    "pace": ("the full replay ran past", "its prefix's pace allows"),
    "prefix budget": ("the round's prefix budget",),
    "stuck": ("stuck between two ticks",),
}


def stopped_by(record: TrialRecord) -> str | None:
    """Which of the three limits stopped this replay (None: none did)."""
    reason = record.result.reason or ""
    if record.result.status != "timed_out":
        return None
    return next((name for name, phrases in LIMITS.items() if any(words in reason for words in phrases)), None)


def main() -> None:
    factor, stuck = stall.STALL_FACTOR, stall.STUCK_FACTOR
    print(f"pace factor {factor:g}x, prefix budget {stall.PREFIX_FACTOR:g}x the slowest told prefix, "
          f"stuck at {stuck:g}x the slowest tick (floors {stall.STALL_FLOOR_SECONDS:g} s, stuck {stall.STUCK_FLOOR_SECONDS:g} s); replays they stopped are "
          f"replayed again with the pace at {OLD_FACTOR:g}x, no prefix budget and never stuck\n")  # fmt: skip
    print("| trace | replays with a checkpoint | ran to their end: max ratio | stopped by the pace limit "
          "| by the prefix budget | stuck between two ticks "
          f"| without them: finished (false time-outs) | without them: stopped again "
          f"| false time-outs in the sweep's top {TOP} |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|")
    for name, trace in traces():
        records, limit = sweep_records(trace)
        paced = [r for r in records if ratio(r) is not None]
        ended = [ratio(r) for r in paced if r.result.status in ("feasible", "infeasible")]
        stopped = [r for r in records if stopped_by(r) is not None]
        scores = sorted((r.result.score for r in records if r.result.score is not None), reverse=True)
        bar = scores[TOP - 1] if len(scores) >= TOP else float("-inf")
        # Read in this process by the worker and, after the fork, by the child's watch: the old limits.
        stall.STALL_FACTOR, stall.STUCK_FACTOR = OLD_FACTOR, float("inf")
        try:
            again = dict(evaluate_trials({r.key: r.spec for r in stopped}, max_eval_seconds=limit, parallel=CORES))
        finally:
            stall.STALL_FACTOR, stall.STUCK_FACTOR = factor, stuck
        finished = [result for result in again.values() if result.status in ("feasible", "infeasible")]
        ranked = [result for result in finished if result.score is not None and result.score >= bar]
        counts = [sum(stopped_by(r) == limit_name for r in stopped) for limit_name in LIMITS]
        print(f"| {name} | {len(paced)} | {max(ended, default=float('nan')):.2f} | "
              + " | ".join(str(c) for c in counts)
              + f" | {len(finished)} | {len(stopped) - len(finished)} | {len(ranked)} |")  # fmt: skip
        for r in stopped:
            result = again[r.key]
            print(f"  {r.key[:12]}: {stopped_by(r)} after {r.result.cpu_seconds:.1f} CPU s; without it "
                  f"{result.status} after {result.cpu_seconds:.1f} CPU s ({(result.reason or '')[:90]})")  # fmt: skip


if __name__ == "__main__":
    main()
