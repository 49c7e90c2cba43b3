"""When a running replay is stopped: at its time limit, or earlier when it has stalled.

The replay exposes no progress while it runs, and its cost per simulated second explodes once a
queue grows deep (measured on the shipped trace at half speed, SGLang disagg 1 x TP4 + 1 x TP4:
its first 20 % of simulated time replays in 0.3 s, 65 % in 0.7 s, 80 % not within 30 s). A
screened trial gives two checkpoints to judge its pace by:

- its prefix must finish within its share of the limit (`fraction` x `max_eval_seconds`): slower,
  the full replay cannot finish in time at the same pace;
- after the prefix, the full replay gets `STALL_FACTOR` times what the prefix's pace predicts for
  it (prefix seconds / fraction). Past that, its queue has run away; no further minute of such a
  replay changes the verdict, and its round would wait for it.

Both get at least `STALL_FLOOR_SECONDS`, and neither goes past the time limit. A replay with an
autoscaling planner is not paced: its cost goes with the planner's ticks, not with simulated time
(a prefix can end before the first tick), so its prefix says nothing of the rest's pace.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

STALL_FACTOR = 10.0
STALL_FLOOR_SECONDS = 10.0
STALLED = "stalled"  # how a stall's reason starts (a timed-out trial's reason otherwise starts "replay exceeded")


@dataclass(frozen=True)
class Deadline:
    at: float  # time.perf_counter() value
    reason: str  # why the replay is stopped if it is still running then


def limit_deadline(started: float, timeout: float | None) -> Deadline | None:
    if timeout is None:
        return None
    return Deadline(started + timeout, f"replay exceeded max_eval_seconds={timeout:g} and was stopped")


def prefix_deadline(started: float, timeout: float | None, screen: dict[str, Any] | None) -> Deadline | None:
    """The prefix's share of the time limit, for a call with a screen (None without a limit or a screen)."""
    if timeout is None or not screen or not screen.get("fraction"):
        return None
    share = min(timeout, max(STALL_FLOOR_SECONDS, screen["fraction"] * timeout))
    return Deadline(
        started + share,
        f"{STALLED}: its prefix ({screen['prefix']}) did not finish within {share:.0f} s, its share of "
        f"max_eval_seconds={timeout:g}; at that pace the full replay cannot finish in time",
    )


def pace_deadline(heard: float, screen: dict[str, Any] | None, verdict: dict[str, Any]) -> Deadline | None:
    """The full replay's deadline from its prefix's pace, counted from when the prefix's verdict was heard."""
    if not screen or not screen.get("fraction"):
        return None
    expected = float(verdict.get("replay_seconds", 0.0)) / screen["fraction"]
    budget = max(STALL_FLOOR_SECONDS, STALL_FACTOR * expected)
    return Deadline(
        heard + budget,
        f"{STALLED}: the full replay ran past {budget:.0f} s, over {STALL_FACTOR:g}x the {expected:.1f} s its "
        "prefix's pace predicts (a queue that keeps growing makes the simulator crawl)",
    )


def earliest(*deadlines: Deadline | None) -> Deadline | None:
    present = [d for d in deadlines if d is not None]
    return min(present, key=lambda d: d.at) if present else None
