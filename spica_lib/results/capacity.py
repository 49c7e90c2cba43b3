"""How much more traffic could the winners take? Each one's capacity within the SLA, by bisection with replays.

After the finish, the top `sweep.capacity_top` deployments (in the finish's order, the
recommendation first) are replayed with the workload's arrivals sped up by a load factor: a
synthetic workload's `request_rate` times the factor (with the same number of requests), a trace's
`arrival_speedup_ratio` times the factor. Factor 1 is the search's own replay. The factor doubles
until a replay misses the SLA (the percentile bound or the `goal.sla_coverage` floor, whichever the
goal has; a replay that fails or runs out of time counts as a miss), up to `MAX_FACTOR`; then the
bracket is halved in log space until its ends are within `RESOLUTION` of each other. The capacity is
the highest factor that met the SLA, times the offered rate; the headroom is how far that is above
the offered load. Every replayed point is kept, so the report can draw latency against load.

Each step depends on the last, so the deployments are bisected side by side: one batch of replays
(one per deployment still open) per step.

A bisection step is one replay on one traffic sample, so the bracket it closes is noisy. The load it
found, and the step above it, are then confirmed on CONFIRM_SAMPLES fresh samples each (the finish's
kind of fresh sample: new arrival draws, trace resamples, the held-out part). A load that misses the SLA
on any of them is not used as a capacity: the highest load below it that met the SLA in the bisection is
confirmed the same way, and the capacity is the confirmed one (`confirmed_factor`; None when neither
held, and the deployment is then sized at its offered load only). The sentence says on how many fresh
samples each load met the SLA, and the step above missed it.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from pydantic import BaseModel, ConfigDict, Field

from spica_lib.config import SmartSearchConfig, Workload
from spica_lib.pools.estimate import traffic_of
from spica_lib.results.finish import SAMPLE_SEPARATOR
from spica_lib.trial.screen import screen_plan
from spica_lib.trial.spec import TrialRecord, TrialResult, TrialSpec, TrialStatus

CAPACITY_SEPARATOR = "^"  # "<trial key>^<load factor>" ("~" is the stress test's, "@" a workload's)
MAX_FACTOR = 16.0  # the highest load factor tried: a deployment that still meets the SLA there is "at least"
RESOLUTION = 1.1  # the bracket is closed once its ends are within 10 % of each other
MAX_STEPS = 4 + 4  # doublings to MAX_FACTOR, then bisections down to RESOLUTION (for the job's time limit)
CURVE_METRICS = ("mean_ttft_ms", "p99_ttft_ms", "mean_itl_ms", "p99_itl_ms", "sla_coverage")
CONFIRM_SAMPLES = 3  # fresh samples the reported load and the step above it are replayed on
# Per deployment, for the job's time limit: the steps, the found load and the step above, and the step below.
MAX_REPLAYS = MAX_STEPS + 3 * CONFIRM_SAMPLES


class LoadPoint(BaseModel):
    """One replay of a deployment at `factor` times the offered load."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    factor: float
    rate_rps: float | None  # the arrival rate replayed (None: the workload has no single rate)
    status: TrialStatus
    meets_sla: bool
    reason: str | None = None
    metrics: dict[str, float] = Field(default_factory=dict)  # CURVE_METRICS the replay reported
    cpu_seconds: float = 0.0  # the replay's CPU time (bench/sweep_overhead.py counts every replay a sweep runs)


class DeploymentCapacity(BaseModel):
    """One deployment's load points and the bracket they give."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    key: str
    points: list[LoadPoint] = Field(default_factory=list)  # by factor
    capacity_factor: float = 1.0  # the highest factor that met the SLA in the bisection (one replay per step)
    broke_at_factor: float | None = None  # the lowest factor above it that missed (None: none up to MAX_FACTOR)
    # The confirmation on fresh samples: at capacity_factor, at broke_at_factor, and at the step below when
    # capacity_factor was not confirmed.
    confirmed: list[LoadPoint] = Field(default_factory=list)
    # The highest factor that met the SLA on every fresh sample it was confirmed on: the capacity to use (None: no
    # factor was confirmed; absent in files written before it, read as capacity_factor).
    confirmed_factor: float | None = None

    def confirmation(self, factor: float) -> tuple[int, int]:
        """(fresh samples that met the SLA at `factor`, fresh samples replayed there)."""
        points = [p for p in self.confirmed if p.factor == factor]
        return sum(p.meets_sla for p in points), len(points)

    @property
    def usable_factor(self) -> float:
        """The load factor a plan may count on: the confirmed one, else the offered load (1.0)."""
        if not self.confirmed:
            return self.capacity_factor  # a file from before the confirmation
        return self.confirmed_factor if self.confirmed_factor is not None else 1.0

    @property
    def headroom(self) -> float:
        """The share of extra load it takes within the SLA, confirmed (0.5: 50 % above the offered load)."""
        return self.usable_factor - 1.0

    def step_below(self) -> float | None:
        """The highest factor below capacity_factor that met the SLA in the bisection (None: none)."""
        return max((p.factor for p in self.points if p.meets_sla and p.factor < self.capacity_factor), default=None)


class CapacityResult(BaseModel):
    """Artifact `capacity.json`: the top deployments' capacity within the SLA, and every point replayed."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    offered_rps: float | None = None  # the workload's own arrival rate (None: several workloads, or none)
    deployments: list[DeploymentCapacity] = Field(default_factory=list)  # the finish's order
    note: str | None = None  # why nothing was bisected

    def sentence(self, index: int = 0) -> str | None:
        """`serves up to X req/s within the SLA; Y % headroom over the offered load` for one deployment."""
        if index >= len(self.deployments):
            return None
        d = self.deployments[index]
        at_least = "at least " if d.broke_at_factor is None and d.usable_factor == d.capacity_factor else ""
        factor = d.usable_factor
        rate = f"{factor * self.offered_rps:.3g} req/s" if self.offered_rps else f"{factor:.3g}x the load"
        if d.confirmed and d.confirmed_factor is None:
            text = (
                f"not confirmed at any load: {d.capacity_factor:.3g}x the load met the SLA in the bisection but not on "
                "every fresh sample; count on the offered load only"
            )
        elif d.capacity_factor <= 1.0 and d.broke_at_factor is not None:
            text = (
                f"serves the offered {rate} within the SLA with under {100 * (d.broke_at_factor - 1):.0f} % headroom "
                f"({d.broke_at_factor:.3g}x the load misses it)"
            )
        else:
            text = (
                f"serves up to {at_least}{rate} within the SLA; {at_least}{100 * d.headroom:.0f} % headroom "
                "over the offered load"
            )
        return text + _confirmation_text(d)


def _confirmation_text(d: DeploymentCapacity) -> str:
    met, replayed = d.confirmation(d.capacity_factor)
    if not replayed:
        return " (one replay per load, not confirmed on fresh samples)"
    held = f"met on {met} of {replayed} fresh samples" + ("" if met == replayed else ": not confirmed, so not used")
    text = f" ({d.capacity_factor:.3g}x the load {held}"
    below = d.step_below()
    if met < replayed and below is not None:
        still, tried = d.confirmation(below)
        if tried:
            text += f"; {below:.3g}x met on {still} of {tried}" + ("" if still == tried else ", not used either")
    if d.broke_at_factor is not None:
        still, above = d.confirmation(d.broke_at_factor)
        text += f"; {d.broke_at_factor:.3g}x missed on {above - still} of {above}"
    return text + ")"


def offered_rate(workload: Workload) -> float | None:
    """The workload's arrival rate in requests per second (a trace's: its records over its sped-up span)."""
    traffic = traffic_of(workload)
    return traffic.rate if traffic is not None else None


def scaled(workload: Workload, factor: float) -> Workload:
    """The workload with its arrivals `factor` times as fast and as many requests as before."""
    if workload.is_trace_based:
        return workload.model_copy(update={"arrival_speedup_ratio": float(workload.arrival_speedup_ratio) * factor})
    requests = workload.resolved_request_count()
    rate = float(workload.request_rate) * factor
    return workload.model_copy(update={"request_rate": rate, "num_request_ratio": requests / rate})


def at_load(config: SmartSearchConfig, spec: TrialSpec, factor: float) -> TrialSpec:
    """The trial with every workload's arrivals `factor` times as fast (screened like a search trial)."""

    def request(replay):  # noqa: ANN001, ANN202 (a ReplayRequest)
        workload = scaled(replay.workload, factor)
        screen = screen_plan(config, replay.concurrency, workload)
        return replay.model_copy(update={"workload": workload, "screen": screen})

    parts = [part.model_copy(update={"replay": request(part.replay)}) for part in spec.workloads or []]
    return spec.model_copy(update={"replay": request(spec.replay), "workloads": parts or None})


def point(factor: float, spec: TrialSpec, result: TrialResult) -> LoadPoint:
    metrics = {name: result.metrics[name] for name in CURVE_METRICS if name in result.metrics}
    rate = None if spec.workloads else offered_rate(spec.replay.workload)
    return LoadPoint(factor=factor, rate_rps=rate, status=result.status, meets_sla=result.status == "feasible",
                     reason=result.reason, metrics=metrics, cpu_seconds=result.cpu_seconds)  # fmt: skip


def bracket(points: list[LoadPoint]) -> tuple[float, float | None]:
    """(highest factor that met the SLA below the lowest that missed, that lowest miss or None)."""
    missed = [p.factor for p in points if not p.meets_sla]
    high = min(missed) if missed else None
    met = [p.factor for p in points if p.meets_sla and (high is None or p.factor < high)]
    return max(met, default=1.0), high


def next_factor(points: list[LoadPoint]) -> float | None:
    """The next load factor to replay, or None when the bracket is closed (or MAX_FACTOR still meets it)."""
    low, high = bracket(points)
    if high is None:
        return None if low >= MAX_FACTOR else min(2.0 * low, MAX_FACTOR)
    if high / low <= RESOLUTION:
        return None
    return math.sqrt(low * high)


def settle(key: str, points: list[LoadPoint]) -> DeploymentCapacity:
    low, high = bracket(points)
    return DeploymentCapacity(key=key, points=sorted(points, key=lambda p: p.factor), capacity_factor=low,
                              broke_at_factor=high)  # fmt: skip


def offered_rps(config: SmartSearchConfig) -> float | None:
    return None if config.workloads else offered_rate(config.workload.search_part())


Replayer = Callable[[dict[str, TrialSpec]], dict[str, TrialResult]]


def bisect_capacity(
    config: SmartSearchConfig,
    top: dict[str, TrialRecord],
    replay: Replayer,
    on_point: Callable[[str, LoadPoint], None] | None = None,
) -> CapacityResult:
    """Each top deployment's bracket (key -> its search trial, in the finish's order), one batch of replays per step.

    Factor 1 is the search's own replay of each deployment (a ranked one met the SLA there).
    """
    problem = config.why_no_capacity()
    if problem or not top:
        return CapacityResult(note=problem or "no feasible deployment to size")
    points = {key: [point(1.0, record.spec, record.result)] for key, record in top.items()}
    while steps := {key: f for key, found in points.items() if (f := next_factor(found)) is not None}:
        specs = {f"{key}{CAPACITY_SEPARATOR}{f:g}": at_load(config, top[key].spec, f) for key, f in steps.items()}
        results = replay(specs)
        for name, spec in specs.items():
            key = name.partition(CAPACITY_SEPARATOR)[0]
            found = point(steps[key], spec, results[name])
            points[key].append(found)
            if on_point is not None:
                on_point(key, found)
    settled = [settle(k, p) for k, p in points.items()]
    confirm = {
        f"{d.key}{CAPACITY_SEPARATOR}{factor:g}{SAMPLE_SEPARATOR}{i}": (d.key, factor, spec.on_fresh_sample(i))
        for d in settled
        for factor in [d.capacity_factor, *([d.broke_at_factor] if d.broke_at_factor is not None else [])]
        for spec in [at_load(config, top[d.key].spec, factor)]
        for i in range(CONFIRM_SAMPLES)
    }
    by_key = {d.key: d for d in settled}
    _confirm(confirm, replay, by_key, on_point)
    # A found load that missed the SLA on a fresh sample is not a capacity: confirm the step below it.
    below = {
        f"{d.key}{CAPACITY_SEPARATOR}{factor:g}{SAMPLE_SEPARATOR}{i}": (d.key, factor, spec.on_fresh_sample(i))
        for d in settled
        if not _held(d, d.capacity_factor) and (factor := d.step_below()) is not None
        for spec in [at_load(config, top[d.key].spec, factor)]
        for i in range(CONFIRM_SAMPLES)
    }
    _confirm(below, replay, by_key, on_point)
    for d in settled:
        held = [f for f in (d.capacity_factor, d.step_below()) if f is not None and _held(d, f)]
        d.confirmed_factor = held[0] if held else None
    return CapacityResult(offered_rps=offered_rps(config), deployments=settled)


def _confirm(
    batch: dict[str, tuple[str, float, TrialSpec]],
    replay: Replayer,
    by_key: dict[str, DeploymentCapacity],
    on_point: Callable[[str, LoadPoint], None] | None,
) -> None:
    results = replay({name: spec for name, (_, _, spec) in batch.items()}) if batch else {}
    for name, (key, factor, spec) in batch.items():
        found = point(factor, spec, results[name])
        by_key[key].confirmed.append(found)
        if on_point is not None:
            on_point(key, found)


def _held(d: DeploymentCapacity, factor: float) -> bool:
    """Whether `factor` was confirmed: replayed on fresh samples and met the SLA on every one."""
    met, replayed = d.confirmation(factor)
    return replayed > 0 and met == replayed
