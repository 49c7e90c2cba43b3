"""When a running replay is stopped for its time: at its limit, or earlier when its pace says it has stalled.

These checks judge a replay from outside, by its CPU time; they are time limits, and a replay they
stop is recorded `timed_out`, never as a verdict on the candidate. Every replay is also watched
from inside (replay/progress.py), which marks the pace checkpoint: the prefix's share of the workload's requests completed (trial/screen.py). A replay's
cost per simulated second explodes once a queue grows deep (bench/replay_cost.py: on the shipped
trace at half speed, SGLang disagg 1 x TP4 + 1 x TP4 replays its first 20 % of simulated time in
well under a second and then crawls for minutes). The checkpoint gives two limits:

- the prefix must be done within its share of the limit (`fraction` x `max_eval_seconds`, the
  fraction counted in requests, the work, not in simulated time), and from round 1 on within the round's
  prefix budget too (`prefix_seconds`, search/rounds.py `prefix_budget`: PREFIX_FACTOR times the slowest
  prefix the sweep's replays told before the round took): a replay that crawls from its start is stopped
  once it is that far behind every one seen, not at its share of a limit sized for any replay;
- after it, the rest gets `STALL_FACTOR` times what the prefix's pace predicts for it (prefix CPU
  seconds / fraction).

Both get at least `STALL_FLOOR_SECONDS`, and neither goes past the time limit. Both count the
replay child's own CPU time, not wall time: on a busy machine (other replays, other jobs) a
healthy replay waits for a core, and wall time would call that a stall. A replay with a planner has
its checkpoint too (the watch wraps the planner's scaling policy, replay/progress.py).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

# 3x: on two traces' sweeps (the shipped Mooncake trace, the 12k conversation trace) every replay that ran to
# its end used at most 1.58x what its prefix predicted, and none that 3x stopped finished with 10x
# (bench/pace_ratio.py, docs/benchmarks/replay.md, "The pace limit"). 10x let each crawl run three times longer.
STALL_FACTOR = 3.0
STALL_FLOOR_SECONDS = 10.0
# A round's prefix budget: this many times the slowest prefix told before it (see the module docstring). On the
# 12k-request conversation trace the slowest of 24 prefixes took 2.4 CPU s (the floor, 10 s, then decides) and
# a crawl's prefix ran to its 24 s share of max_eval_seconds=120.
PREFIX_FACTOR = 3.0
# Stuck between two ticks (replay/progress.py): no beat for this many times the slowest tick so far, and at least
# STUCK_FLOOR_SECONDS (two crawls of the conversation trace gave no tick for over 90 s after ticks every few ms;
# bench/pace_ratio.py replays every replay it stops without it).
STUCK_FACTOR = 20.0
STUCK_FLOOR_SECONDS = 5.0
STALLED = "stalled"  # how a stall's reason starts (a timed-out trial's reason otherwise starts "replay exceeded")
_TICKS = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Stall:
    cpu_seconds: float  # the child's CPU time past which it has stalled
    reason: str


def child_cpu_seconds(pid: int) -> float:
    """A running child's CPU time so far (user + system), from /proc; 0 if it is already gone."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / _TICKS  # utime and stime, fields 14 and 15 of stat


def limit_reason(timeout: float) -> str:
    return f"replay exceeded max_eval_seconds={timeout:g} and was stopped"


def prefix_stall(timeout: float | None, rules: dict[str, Any] | None) -> Stall | None:
    """The prefix's share of the time limit, for a call with a pace checkpoint (None without a limit or one)."""
    if timeout is None or not rules or not rules.get("prefix_requests"):
        return None
    share = min(timeout, max(STALL_FLOOR_SECONDS, rules["fraction"] * timeout))
    budget = rules.get("prefix_seconds")
    if budget is not None and max(STALL_FLOOR_SECONDS, budget) < share:
        budget = max(STALL_FLOOR_SECONDS, budget)
        return Stall(
            budget,
            f"{STALLED}: its prefix ({rules['prefix']}) was not done within {budget:.0f} CPU s, the round's prefix "
            f"budget ({PREFIX_FACTOR:g}x the slowest prefix the sweep told before it, at least "
            f"{STALL_FLOOR_SECONDS:g} s; a time limit, not a verdict on the candidate)",
        )
    return Stall(
        share,
        f"{STALLED}: its prefix ({rules['prefix']}) was not done within {share:.0f} CPU s, its share of "
        f"max_eval_seconds={timeout:g} (a time limit, not a verdict on the candidate)",
    )


def stuck_stall(beat: dict[str, Any]) -> Stall | None:
    """The CPU time past which a replay whose last beat is `beat` is stuck between two ticks (see the module
    docstring of replay/progress.py); None when an autoscaling planner sets the ticks.

    The rule reads the ticks the watch asks for itself, a few CPU ms apart and even. A planner's ticks are its
    adjustment intervals (30 s and more of simulated time): one interval over a burst legitimately costs many
    times the light ones before it, and the planner's first decision loads its predictor, so "20x the slowest
    so far" stopped healthy planner replays. Those are bounded by the prefix share, the pace limit and
    max_eval_seconds alone."""
    if beat.get("planner"):
        return None
    limit = max(STUCK_FLOOR_SECONDS, STUCK_FACTOR * float(beat["slowest_tick"]))
    return Stall(
        float(beat["cpu_seconds"]) + limit,
        f"{STALLED}: no tick for {limit:.0f} CPU s after {beat['finished']} of {beat['requests']} requests "
        f"finished ({float(beat['at_sim_ms']) / 1000:.0f} s simulated): the simulator is stuck between two ticks, "
        f"over {STUCK_FACTOR:g}x its slowest tick so far ({float(beat['slowest_tick']):.2f} s; a time limit, not "
        "a verdict on the candidate)",
    )


def rest_budget(prefix_cpu: float, fraction: float, floor: float | None = None) -> tuple[float, float]:
    """The CPU the rest of a replay may take after a prefix of `fraction` of its requests took `prefix_cpu`, at
    least `floor` (STALL_FLOOR_SECONDS when None): (the budget, what the prefix's pace predicts for the whole
    replay)."""
    expected = prefix_cpu / fraction
    return max(STALL_FLOOR_SECONDS if floor is None else floor, STALL_FACTOR * expected), expected


def pace_stall(cpu_now: float, rules: dict[str, Any] | None, checkpoint: dict[str, Any]) -> Stall | None:
    """The rest of the replay's CPU budget from its prefix's pace, counted from `cpu_now` (when the checkpoint
    was heard)."""
    if not rules or not rules.get("prefix_requests"):
        return None
    budget, expected = rest_budget(float(checkpoint.get("cpu_seconds", 0.0)), rules["fraction"])
    return Stall(
        cpu_now + budget,
        f"{STALLED}: the full replay ran past {budget:.0f} CPU s, over {STALL_FACTOR:g}x the {expected:.1f} s its "
        "prefix's pace predicts (a time limit: a queue that keeps growing makes the simulator crawl)",
    )
