"""The prefix screen, judged from inside the replay: one pass instead of a prefix replay and a full one.

A replay without a planner reports its progress every tick (replay/progress.py): the requests each
worker holds, queued or running, and the tick's `traffic`, which holds the mean TTFT of the requests
that completed in the last window, with their count. With a screen, `SlaWatch` judges them
against the SLA's bounds:

- **A queue that has run away** (any time): a request waiting in a prefill queue has no first token
  yet, so the time requests have spent queued for prefill (the queue's length integrated over
  simulated time) is a lower bound on their summed TTFT. Once it reaches `margin x bound x requests`,
  the mean TTFT over the whole workload is at least `margin x` the bound whatever the rest does: the
  replay stops. A percentile bound (p90, p99) is judged by the same mean, which is at most the high
  percentiles of a latency. (A request preempted back into the queue would count twice; the margin
  covers it.)
- **The completed requests' TTFTs alone** (any time) sum past `margin x bound x requests` of a
  mean-TTFT bound: the final mean cannot come back under `margin x` the bound, which is what the
  screen stops at (a goodput target still counts what a candidate serves within a bound it misses
  on average, so a smaller miss is not the screen's to call).
- **At the screen's point** (as many requests completed as the prefix holds, for a synthetic
  workload; the prefix's simulated time, for a trace): the worst bound's running mean over the
  completed requests is compared with `margin x bound`, as the prefix replay's was. Below it, that
  verdict is told (the worker paces the rest by it) and the replay goes on; at or over it, it stops.

Only TTFT bounds are judged from inside. The ticks' ITL is each request's mean time per output
token, weighted by request, while the SLA's ITL statistic weights every token alike, and on a trace
of mixed lengths the two differ severalfold. So an ITL bound, like an end-to-end bound (the ticks
carry no e2e latency), is left to the finished replay's metrics.

A stop raises `ReplayScreened` with the verdict (screened, metric, value, ratio, prefix, why) and the
running metrics, which the trial is recorded with. Kept free of heavy imports: it runs in the replay
child.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from spica_lib.replay.call import NO_REQUEST_DONE  # the ratio told when nothing finished by the screen's point


class ReplayScreened(Exception):
    """Raised inside the replay's callback to stop a replay the SLA has already ruled out."""

    def __init__(self, verdict: dict[str, Any], metrics: dict[str, float]):
        super().__init__(verdict["why"])
        self.verdict = verdict
        self.metrics = metrics


class SlaWatch:
    """Running TTFT / ITL means against the screen's bounds (see the module docstring)."""

    def __init__(self, screen: dict[str, Any], requests: int, on_screen: Callable[[dict[str, Any]], None] | None):
        self.bounds = [(str(metric), float(bound)) for metric, bound in screen["bounds"]]
        self.margin = float(screen["margin"])
        self.prefix = str(screen["prefix"])
        self.prefix_requests = screen.get("args", [None, None, None])[2]  # synthetic: the prefix's request count
        self.prefix_sim_ms = (screen.get("kwargs") or {}).get("max_sim_time_ms")  # trace: its simulated time
        self.requests = max(1, int(requests))
        self.on_screen = on_screen
        self.verdict: dict[str, Any] | None = None  # told at the screen's point
        self._sums = {"ttft": [0.0, 0]}
        self._queued_ms = 0.0  # requests x simulated ms spent waiting for prefill (a lower bound on summed TTFT)
        self._last: tuple[float, int] | None = None  # the previous tick's (now_ms, queued)
        self._started, self._cpu = time.perf_counter(), time.process_time()

    def on_tick(self, now_ms: float, traffic: dict[str, Any], queued: int, finished: int) -> None:
        """One tick: `traffic` as the replay reports it, `queued` the requests waiting for prefill now."""
        count = int(traffic.get("ttft_count", 0) or 0)
        self._sums["ttft"][0] += float(traffic.get("avg_ttft_ms", 0.0) or 0.0) * count
        self._sums["ttft"][1] += count
        if self._last is not None:  # the fewer of the two ends over the interval: no more than was queued
            self._queued_ms += min(self._last[1], queued) * max(0.0, now_ms - self._last[0])
        self._last = (now_ms, queued)
        self._queue_ran_away(now_ms, queued, finished)
        self._certain(now_ms, finished)
        if self.verdict is None and self._at_screen_point(now_ms):
            self._judge_screen_point(finished)

    def final_verdict(self, metrics: dict[str, float]) -> dict[str, Any]:
        """The verdict of a replay that ran to its end: the one told at the screen's point, or (a replay too
        short to tick there) its whole-run metrics judged as the prefix's would have been."""
        if self.verdict is not None:
            return self.verdict
        done = bool(metrics.get("completed_requests"))
        metric, value, ratio = self._worst(metrics, done, every_bound=True)  # the replay's own statistics
        return self._verdict(False, metric, value, ratio, self.prefix, None)

    def _queue_ran_away(self, now_ms: float, queued: int, finished: int) -> None:
        for metric, bound in self.bounds:
            if _kind(metric) != "ttft":
                continue
            value = self._queued_ms / self.requests
            if value >= self.margin * bound:
                why = (f"{queued} requests were waiting for prefill at {now_ms / 1000:.0f} s simulated; the time "
                       f"spent in that queue alone puts the mean TTFT over all {self.requests} requests at "
                       f"{value:.4g} ms or more, at least {self.margin:g}x the {metric} bound")  # fmt: skip
                raise ReplayScreened(self._verdict(True, metric, value, value / bound, self.prefix, why),
                                     self._metrics(finished))  # fmt: skip

    def _certain(self, now_ms: float, finished: int) -> None:
        total, _ = self._sums["ttft"]
        for metric, bound in self.bounds:
            if metric == "mean_ttft_ms" and total >= self.margin * self.requests * bound:
                value = total / self.requests
                why = (f"the TTFTs of its first {self._sums['ttft'][1]} completed requests already sum to "
                       f"{total / 1000:.0f} s by "
                       f"{now_ms / 1000:.0f} s simulated: a mean over all {self.requests} is at least "
                       f"{value:.4g} ms whatever the rest does, at least {self.margin:g}x its bound")  # fmt: skip
                raise ReplayScreened(self._verdict(True, metric, value, value / bound, self.prefix, why),
                                     self._metrics(finished))  # fmt: skip

    def _at_screen_point(self, now_ms: float) -> bool:
        if self.prefix_requests is not None:
            return self._sums["ttft"][1] >= int(self.prefix_requests)
        return self.prefix_sim_ms is not None and now_ms >= float(self.prefix_sim_ms)

    def _judge_screen_point(self, finished: int) -> None:
        metric, value, ratio = self._worst(self._running(), done=self._sums["ttft"][1] > 0)
        if ratio >= self.margin:
            self._stop(f"{{shown}} on the {self.prefix} (its first {self._sums['ttft'][1]} completed requests), "
                       f"at least {self.margin:g}x its bound", finished)  # fmt: skip
        self.verdict = self._verdict(False, metric, value, ratio, self.prefix, None)
        if self.on_screen is not None:
            self.on_screen(self.verdict)

    def _stop(self, why: str, finished: int) -> None:
        metric, value, ratio = self._worst(self._running(), done=self._sums["ttft"][1] > 0)
        shown = "no request finished" if ratio >= NO_REQUEST_DONE else f"{metric} {value:.4g}"
        verdict = self._verdict(True, metric, value, ratio, self.prefix, why.format(shown=shown))
        raise ReplayScreened(verdict, self._metrics(finished))

    def _running(self) -> dict[str, float]:
        means = {name: total / count for name, (total, count) in self._sums.items() if count}
        return {metric: means[kind] for metric, _ in self.bounds if (kind := _kind(metric)) in means}

    def _worst(self, values: dict[str, float], done: bool, every_bound: bool = False) -> tuple[str, float, float]:
        worst = ("", 0.0, 0.0)
        for metric, bound in self.bounds:
            if _kind(metric) is None and not every_bound:
                continue  # an ITL or e2e bound: judged on the finished replay only
            value = values.get(metric)
            candidate = (metric, 0.0, NO_REQUEST_DONE) if not done or value is None else (metric, value, value / bound)
            worst = max(worst, candidate, key=lambda w: w[2])
        return worst

    def _verdict(self, screened: bool, metric: str, value: float, ratio: float, prefix: str, why: str | None) -> dict:
        return {"screened": screened, "metric": metric, "value": value, "ratio": ratio, "prefix": prefix,
                "replay_seconds": time.perf_counter() - self._started,
                "cpu_seconds": time.process_time() - self._cpu, "why": why}  # fmt: skip

    def _metrics(self, finished: int) -> dict[str, float]:
        means = {f"mean_{name}_ms": total / count for name, (total, count) in self._sums.items() if count}
        completed = self._sums["ttft"][1] or finished
        return {"completed_requests": float(completed), "num_requests": float(self.requests), **means}


def _kind(metric: str) -> str | None:
    """Which running mean judges a bound's metric: "ttft", or None (ITL and e2e: see the module docstring)."""
    return "ttft" if "_ttft_" in f"_{metric}_" else None
