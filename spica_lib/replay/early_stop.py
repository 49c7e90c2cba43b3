"""Early stops from inside a replay, only where a bound that holds whatever the rest of the traffic does
says the replay can no longer matter.

A replay reports every tick (replay/progress.py; with a planner, the planner's own ticks): the requests
that arrived in the last window (`num_req`), the requests that completed in it with their mean TTFT (`ttft_count`,
`avg_ttft_ms`), and per worker the requests it holds, among them those waiting for their prefill
(`num_queued_prefill`; a request preempted after its first token waits as queued *decode*, not here).
From these, at each tick, a lower bound on how many requests miss a latency bound B:

- **waiting**: a request still waiting for its prefill that arrived at least B ago has no first token
  after B, so its TTFT is over B. Of the `queued` requests waiting now, at most the arrivals since the
  last tick at least B back can be younger than B: `queued - (arrived now - arrived then)` are past it.
  For an end-to-end bound every request not yet completed counts, not only the queued ones.
- **completed**: a window's c completed requests with mean TTFT m sum to c*m; each TTFT is at most the
  simulated time now, so at least `ceil((c*m - c*B) / (now - B))` of them are over B (exactly the one
  when c = 1; windows are summed, each request completes in one).
- **late** (an SLA of ttft_ms and itl_ms, for the goodput a prune or a coverage floor counts): a request
  meets it only if it is done ttft_ms + (n - 1) itl_ms after its arrival (its deadline; n its output
  length). Of the requests whose deadline is past, at most the `completed` ones are done, so at least
  `past - completed` will miss, whatever queue they wait in (a prefill queue or a decode one).
- **completed, by the SLA's own bounds** (`sla_ms`, with a prune or a coverage floor): Dynamo's goodput
  counts a request when its TTFT is within the SLA's ttft_ms and its ITL, (e2e - TTFT) / (n - 1), within
  its itl_ms (a one-token request has no ITL). Each tick reports its completions' mean TTFT and their
  mean ITL, one per completion (`avg_itl_ms` over `itl_count`; a window with a one-token completion has
  fewer, and its ITL is not judged). An ITL is also at most the simulated time now, so the completed rule
  above applies to each, and a window's certain SLA misses are the larger of the two counts: with one
  completion per tick, exactly the completions that miss. (tests/test_trial_replay.py holds both to
  the replay's own per-request rows.) With several completions per tick it names fewer.
The sets are disjoint (waiting and late requests have not completed), so completed plus waiting is a
lower bound on the misses of that bound, the misses of any bound bound those of every bound, and the
completed misses of any bound plus the larger of the waiting and the late ones bound the requests that
miss the SLA (`SLA`: every bound at once, what goodput and a coverage floor count). Misses never go
back, so the largest such bound seen so far still holds. A *percentile* or mean of the ITL (a hard
constraint) is not judged: the report's ITL statistics are over every gap between tokens, which the
ticks' per-request means do not bound, so such a bound is never a reason to stop.

**tokens** (a prune): the ticks also give their completions' output tokens (`avg_osl` over
`shape_count`). The tokens that can still count as goodput are at most those of the completions not
certainly missing (a window's, less the fewest tokens its certain misses can hold, and at most its
other completions times the longest request), plus those of the requests not completed whose deadline
is not yet past (no more than the tokens not yet completed). A request that meets the SLA completes by its
deadline, so the ones that complete after any time t were due at or after t: the tokens that can still count are
also at most those of the completions not certainly missing up to some earlier tick t plus the tokens due at or
after t: the least of that over every tick so far (the count of misses needs no such floor: it keeps the most it
has seen). That is what stops a replay whose queue keeps completing requests long past every deadline: its
windows share their completions and name only some of them late, but none completing after the last deadline
can be goodput. Where the bar is close to the most a
deployment can score (the stress test's bar, #1's score on the same traffic), this decides early in a
replay that the count alone decided late or never: the count can only take out the fewest tokens its
misses could hold, and a trace's shortest requests hold almost none.

The rules, each told as a structured stop (rule, metric, bound, simulated time, counts, the bound that
decided and what it was compared with):

- `percentile` (a hard constraint, goal.sla.percentile p): the p-th percentile over all N requests is
  over B once at least `N - floor(p (N - 1) / 100)` requests are (every interpolation between order
  statistics at or above that rank is then over B). The trial is infeasible.
- `coverage` (a hard constraint, goal.sla_coverage f): once more than `N (1 - f)` requests certainly miss
  a bound, fewer than f of them can meet every bound. The trial is infeasible.
- `prune` (a goodput target, soft): an optimistic bound on the final score: every request not yet known
  to miss meets the SLA, so goodput is at most the output tokens of all requests less those of the
  fewest-token requests that certainly miss (or the tokens bound above, where it is lower), over a
  duration of at least the simulated time now (the replay is still running) and at least the trace's
  span. Per GPU, the score is those tokens over the GPU-seconds the deployment holds (goodput over average
  GPUs: the duration cancels). Without a planner that is all its GPUs over the duration. With one, the
  GPU-seconds seen so far (between two ticks, the fewer active workers of each role at either end: the
  planner adds workers at its ticks, and a draining one leaves between them; counted once a request has arrived, when the replay's duration has begun) and,
  for the rest of the duration, one worker of each role (the fewest it can scale to; trial/screen.py).
  When even that is below `below`, the sweep's k-th best score told before the round was suggested
  (search/rounds.py), the trial cannot rank in the top k: it is `pruned`, not infeasible.

A stop raises `ReplayStopped`. The watch also marks the work checkpoint the worker
paces the rest of the replay by (replay/stall.py): once the prefix's share of the requests has
completed, `on_checkpoint` hears the CPU time spent. That is a time limit, never a verdict on the SLA.
Kept free of heavy imports: it runs in the replay child.
"""

from __future__ import annotations

import bisect
import math
import time
from collections.abc import Callable
from itertools import accumulate
from typing import Any

EPSILON = 1e-9
SLA = "sla"  # the misses of every bound at once (a request that is not goodput), beside each metric's own


class ReplayStopped(Exception):
    """Raised inside the replay's callback to stop a replay a sound bound has ruled out."""

    def __init__(self, stop: dict[str, Any]):
        super().__init__(stop["why"])
        self.stop = stop


def percentile_misses_needed(requests: int, percentile: float) -> int:
    """How many of `requests` must be over a bound for their `percentile`-th percentile to be over it."""
    return requests - math.floor(percentile * (requests - 1) / 100.0 + EPSILON)


def coverage_misses_allowed(requests: int, coverage: float) -> float:
    """How many of `requests` may miss the SLA with `coverage` of them still meeting it."""
    return requests * (1.0 - coverage)


class EarlyStopWatch:
    """The sound early stops of one replay (see the module docstring), fed one tick at a time.

    `rules` is the call's `stop` (replay/request.py): requests, bounds [[metric, ms]], percentile,
    coverage, prefix_requests / prefix (the pace checkpoint), and `prune` (below, rank, per_gpu gpus,
    output_tokens, output_lengths or osl, span_ms) or None.
    """

    def __init__(self, rules: dict[str, Any], on_checkpoint: Callable[[dict[str, Any]], None] | None = None):
        self.requests = max(1, int(rules["requests"]))
        self.bounds = [(str(metric), float(bound)) for metric, bound in rules.get("bounds") or []]
        self.percentile = rules.get("percentile")
        self.coverage = rules.get("coverage")
        self.prune = rules.get("prune")
        # The fewest output tokens k requests can hold, for every k (a trace's lengths, sorted and summed once).
        self._fewest = [0, *accumulate(sorted((self.prune or {}).get("output_lengths") or []))]
        self.prefix_requests = rules.get("prefix_requests")
        self.prefix = rules.get("prefix")
        self.fraction = rules.get("fraction")  # the prefix's share of the workload's requests
        self.on_checkpoint = on_checkpoint
        self.checkpoint: dict[str, Any] | None = None
        self.arrived = 0
        self.completed = 0
        self._ttft_sum = 0.0
        # Completed requests certainly over each TTFT bound (metric -> count).
        self._past_ttft = {metric: 0 for metric, _ in self.bounds if _is(metric, "ttft")}
        self._ticks: list[float] = []  # tick times (ms) and the arrivals counted by each
        self._arrivals: list[int] = []
        # When each request must be done to meet the SLA: one list on a trace's clock (sorted), or one span
        # after arrival for all (replay/request.py `_deadlines`); neither without a ttft_ms + itl_ms SLA.
        self._deadlines = rules.get("deadlines_ms")
        self._deadline = rules.get("deadline_ms")
        self._sla_misses = 0  # the most requests seen certain to miss the SLA (every bound at once) so far
        # Per completion, the SLA's own per-request bounds (Dynamo's goodput: TTFT, and ITL as (e2e - TTFT) / (n - 1),
        # the per-request mean each tick reports): completed requests certainly over one, and an upper bound on the
        # output tokens of those that may meet the SLA (see "tokens" in the module docstring).
        self._sla_ms = {name: float(ms) for name, ms in (rules.get("sla_ms") or {}).items() if ms is not None}
        self._completed_sla = 0
        self._completed_tokens = 0.0
        self._open_tokens = 0.0
        self._tokens_known = True  # False once a tick lacks the output lengths of its completions
        # The least, over the ticks so far, of the tokens completed up to the tick that may be goodput plus those due
        # at or after it: the tokens that can still meet the SLA (see "tokens" in the module docstring).
        self._tokens_floor = math.inf
        lengths = (self.prune or {}).get("output_lengths") or []
        osl = (self.prune or {}).get("osl")
        self._osl_range = (min(lengths), max(lengths)) if lengths else ((osl, osl) if osl is not None else None)
        # Output tokens of the requests due at or after each deadline (suffix sums in deadline order).
        tokens = rules.get("deadline_tokens")
        self._due_tokens = [*reversed(list(accumulate(reversed(tokens)))), 0] if tokens else None
        self._most = [0, *accumulate(sorted(lengths, reverse=True))] if lengths else None
        # A planner's GPU-seconds seen so far (prune["worker_gpus"]: GPUs per worker of each role) and the
        # simulated time they cover; the last tick's time and GPUs.
        self._worker_gpus = (self.prune or {}).get("worker_gpus")
        self._held_gpu_seconds, self._held_ms = 0.0, 0.0
        self._last_held: tuple[float, float] | None = None
        self._started, self._cpu = time.perf_counter(), time.process_time()

    @property
    def judges(self) -> bool:
        """Whether some rule can stop the replay: a hard constraint on the SLA's bounds, or a prune bar. Without
        one the watch only marks the pace checkpoint, and the replay's ticks need not be fine (replay/progress.py)."""
        hard = self.percentile is not None or self.coverage is not None
        return self.prune is not None or (hard and bool(self.bounds))

    def on_tick(
        self, now_ms: float, traffic: dict[str, Any], queued_prefill: int, workers: tuple[int, int] | None = None
    ) -> None:
        """One tick: `traffic` as the replay reports it, `queued_prefill` the requests waiting for a prefill,
        `workers` the active prefill and decode workers (an agg deployment's count as decode)."""
        self._hold(now_ms, workers)
        self.arrived += int(traffic.get("num_req", 0) or 0)
        count = int(traffic.get("ttft_count", 0) or 0)
        total = float(traffic.get("avg_ttft_ms", 0.0) or 0.0) * count
        self.completed += count
        self._ttft_sum += total
        for metric, bound in self.bounds:
            if metric in self._past_ttft:
                self._past_ttft[metric] += certainly_over(count, total, bound, now_ms)
        self._judge_completions(now_ms, traffic, count, total)
        self._ticks.append(now_ms)
        self._arrivals.append(self.arrived)
        self._floor_at(now_ms)
        parts = {metric: self._misses(metric, bound, now_ms, queued_prefill) for metric, bound in self.bounds}
        misses = {metric: done + waiting for metric, (done, waiting) in parts.items()}
        if parts:
            waiting = max([w for _, w in parts.values()] + [self._late(now_ms)])
            done = max([d for d, _ in parts.values()] + [self._completed_sla])
            self._sla_misses = max(self._sla_misses, done + waiting)
            if self._sla_misses > max(misses.values()):
                misses[SLA] = self._sla_misses
        self._hard(now_ms, misses)
        self._prune(now_ms, misses)
        self._mark_checkpoint(now_ms)

    def _hold(self, now_ms: float, workers: tuple[int, int] | None) -> None:
        """Count a planner's GPU-seconds since the last tick (see the module docstring)."""
        if self._worker_gpus is None or workers is None:
            return
        gpus = workers[0] * float(self._worker_gpus.get("prefill", 0)) + workers[1] * float(self._worker_gpus.get("decode", 0))
        if self._last_held is not None and self.arrived > 0:  # the duration has begun by the window's start
            then, held = self._last_held
            self._held_gpu_seconds += min(held, gpus) * (now_ms - then) / 1000.0
            self._held_ms += now_ms - then
        self._last_held = (now_ms, gpus)

    def _judge_completions(self, now_ms: float, traffic: dict[str, Any], count: int, ttft_total: float) -> None:
        """Judge the window's completions by the SLA's per-request bounds (see "tokens" in the module docstring)."""
        if not count or not self._sla_ms:
            return
        over = [certainly_over(count, ttft_total, self._sla_ms["ttft"], now_ms)] if "ttft" in self._sla_ms else []
        if "itl" in self._sla_ms and int(traffic.get("itl_count", 0) or 0) == count:  # each completion has an ITL
            itl_total = float(traffic.get("avg_itl_ms", 0.0) or 0.0) * count
            over.append(certainly_over(count, itl_total, self._sla_ms["itl"], now_ms))
        missed = max(over, default=0)
        self._completed_sla += missed
        shapes, osl = traffic.get("shape_count"), traffic.get("avg_osl")
        if shapes is None or osl is None or self._osl_range is None:
            self._tokens_known = False
            return
        tokens = float(osl) * float(shapes)
        self._completed_tokens += tokens
        if int(shapes) != count:  # completions the TTFT count does not name: any of them may be good
            self._open_tokens += tokens
            return
        fewest, most = self._osl_range
        self._open_tokens += max(0.0, min(tokens - missed * fewest, (count - missed) * most))

    def _goodput_tokens(self) -> float:
        """An upper bound on the output tokens of the requests that meet the SLA, as of the last tick (inf: none
        known): the completions that may be goodput plus the tokens not yet completed, and the floor (`_floor_at`,
        whose last tick's term is those completions plus the tokens due after now)."""
        if not self._sla_ms or not self._tokens_known or self.prune is None:
            return math.inf
        unfinished = max(0.0, float(self.prune["output_tokens"]) - self._completed_tokens)
        return min(self._open_tokens + unfinished, self._tokens_floor)

    def _floor_at(self, now_ms: float) -> None:
        """Take this tick into the least (completed tokens that may be goodput) + (tokens due at or after now) so far:
        whatever completes after now meets the SLA only if it was due at or after now."""
        if self._sla_ms and self._tokens_known and self.prune is not None:
            self._tokens_floor = min(self._tokens_floor, self._open_tokens + self._due_after(now_ms))

    def _due_after(self, now_ms: float) -> float:
        """Output tokens of the requests whose deadline is not yet past (inf without deadlines)."""
        if self._due_tokens is not None:
            return float(self._due_tokens[bisect.bisect_left(self._deadlines, now_ms * (1 - EPSILON))])
        if self._deadline is None:
            return math.inf
        # One deadline after arrival: the requests not yet arrived that long ago, holding at most the most tokens.
        due = max(0, self.requests - self._arrived_before(now_ms - float(self._deadline) - EPSILON))
        if self._most is not None:
            return float(self._most[min(due, len(self._most) - 1)])
        osl = self.prune.get("osl")
        return float(osl) * due if osl is not None else math.inf

    def _gpu_seconds(self, duration_ms: float) -> float:
        """The fewest GPU-seconds the deployment can hold over a replay of `duration_ms` (see the docstring)."""
        gpus = float(self.prune.get("gpus") or 1)
        if self._worker_gpus is None:
            return gpus * duration_ms / 1000.0
        return self._held_gpu_seconds + gpus * max(0.0, duration_ms - self._held_ms) / 1000.0

    def _misses(self, metric: str, bound: float, now_ms: float, queued_prefill: int) -> tuple[int, int]:
        """Lower bounds on the completed and on the not completed requests whose `metric` ends over `bound`
        (see the module docstring)."""
        arrived_then = self._arrived_before(now_ms - bound)
        if _is(metric, "ttft"):
            return self._past_ttft[metric], max(0, queued_prefill - (self.arrived - arrived_then))
        if _is(metric, "e2e"):  # every request not completed that arrived at least `bound` ago
            return 0, max(0, arrived_then - self.completed)
        return 0, 0  # ITL: the ticks carry no statistic that bounds the SLA's

    def _arrived_before(self, at_ms: float) -> int:
        """Requests counted by the ticks up to `at_ms` (each arrived by its tick's time)."""
        index = bisect.bisect_right(self._ticks, at_ms) - 1
        return self._arrivals[index] if index >= 0 else 0

    def _late(self, now_ms: float) -> int:
        """A lower bound on the requests not completed whose SLA deadline is past (0 without deadlines)."""
        if self._deadlines is not None:
            past = bisect.bisect_left(self._deadlines, now_ms * (1 - EPSILON))  # strictly before now
        elif self._deadline is not None:
            past = self._arrived_before(now_ms - float(self._deadline) - EPSILON)
        else:
            return 0
        return max(0, past - self.completed)

    def _hard(self, now_ms: float, misses: dict[str, int]) -> None:
        worst = max(misses.items(), key=lambda item: item[1], default=None)
        if worst is None:
            return
        if self.percentile is not None:
            needed = percentile_misses_needed(self.requests, float(self.percentile))
            for metric, bound in self.bounds:
                if misses[metric] >= needed:
                    why = (f"{misses[metric]} of its {self.requests} requests are certainly over the {metric} bound "
                           f"of {bound:g} ms by {now_ms / 1000:.0f} s simulated; {needed} over it put the "
                           f"p{self.percentile:g} over it, whatever the rest does")  # fmt: skip
                    raise ReplayStopped(self._stop("percentile", now_ms, metric, bound, misses[metric], needed, why))
        if self.coverage is not None:
            metric, missed = worst
            allowed = coverage_misses_allowed(self.requests, float(self.coverage))
            if missed > allowed + EPSILON:
                bound = dict(self.bounds).get(metric)
                what = _what_missed(metric, bound)
                why = (f"{missed} of its {self.requests} requests certainly miss {what} "
                       f"by {now_ms / 1000:.0f} s simulated; the {100 * self.coverage:g} % floor lets "
                       f"{allowed:.4g} miss")  # fmt: skip
                raise ReplayStopped(self._stop("coverage", now_ms, metric, bound, missed, allowed, why))

    def _prune(self, now_ms: float, misses: dict[str, int]) -> None:
        prune = self.prune
        if prune is None:
            return
        metric, missed = max(misses.items(), key=lambda item: item[1], default=("", 0))
        unfinished = self.completed < self.requests
        duration_ms = max(float(prune.get("span_ms") or 0.0), now_ms if unfinished else 0.0)
        if duration_ms <= 0:
            return
        good_tokens = min(float(prune["output_tokens"]) - self._fewest_tokens(missed), self._goodput_tokens())
        bound = good_tokens / self._gpu_seconds(duration_ms)
        below = float(prune["below"])
        if bound < below * (1 - 1e-6):
            why = (f"its score can reach at most {bound:.4g} (every request not yet known to miss meets the SLA, "
                   f"over at least {duration_ms / 1000:.0f} s; {missed} certainly miss) by {now_ms / 1000:.0f} s "
                   f"simulated, below {below:.4g}, the sweep's #{prune['rank']} told before this round")  # fmt: skip
            stop = self._stop("prune", now_ms, metric or None, dict(self.bounds).get(metric), missed, None, why)
            raise ReplayStopped({**stop, "score_bound": bound, "below": below, "rank": int(prune["rank"])})

    def _fewest_tokens(self, count: int) -> float:
        """The fewest output tokens `count` requests of the workload can hold."""
        if count <= 0:
            return 0.0
        if self.prune.get("osl") is not None:  # a synthetic workload: every request asks for the same length
            return float(self.prune["osl"]) * count
        return float(self._fewest[min(count, len(self._fewest) - 1)])

    def _mark_checkpoint(self, now_ms: float) -> None:
        if self.checkpoint is not None or self.prefix_requests is None or self.completed < int(self.prefix_requests):
            return
        self.checkpoint = {"prefix": self.prefix, "completed": self.completed, "at_sim_ms": now_ms,
                           "replay_seconds": time.perf_counter() - self._started,
                           "cpu_seconds": time.process_time() - self._cpu}  # fmt: skip
        if self.on_checkpoint is not None:
            self.on_checkpoint(self.checkpoint)

    def _stop(self, rule: str, now_ms: float, metric: str | None, bound: float | None, misses: int,
              limit: float | None, why: str) -> dict[str, Any]:  # fmt: skip
        partial = {"completed_requests": float(self.completed), "arrived_requests": float(self.arrived)}
        if self.completed:
            partial["mean_ttft_ms"] = self._ttft_sum / self.completed
        return {"rule": rule, "metric": metric, "bound_ms": bound, "at_sim_ms": now_ms, "requests": self.requests,
                "certain_misses": misses, "limit": limit, "why": why, "partial_metrics": partial,
                "replay_seconds": time.perf_counter() - self._started,
                "cpu_seconds": time.process_time() - self._cpu}  # fmt: skip




def certainly_over(count: int, total: float, bound: float, now_ms: float) -> int:
    """How many of a window's `count` completions, whose values of a per-request latency sum to `total`, are
    certainly over `bound`: each is at most the simulated time now (a TTFT, or a mean ITL, is at most the request's
    age), so at least ceil((total - count * bound) / (now - bound)) are; exactly the one when count is 1."""
    if not count or total <= count * bound * (1 + EPSILON):
        return 0
    room = now_ms - bound
    past = count if room <= 0 else math.ceil((total - count * bound) / room - EPSILON)
    return min(count, max(1, past))


def _what_missed(metric: str, bound: float | None) -> str:
    """The bound a count of misses is of, in words."""
    if metric == SLA:
        return "the SLA (past their deadline, or over a bound)"
    return f"the {metric} bound of {bound:g} ms"


def _is(metric: str, kind: str) -> bool:
    """Whether an SLA metric (`p90_ttft_ms`, `mean_e2e_latency_ms`) is of `kind` ("ttft", "e2e")."""
    return f"_{kind}_" in f"_{metric}_"
