"""Preparing and evaluating a trial: unroll, size the load, build the plan; gate, replay and score.

Every outcome — feasible, infeasible, failed, timed out, unsupported — is a `TrialResult` with its
reason; nothing is raised for a bad candidate.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from functools import partial
from pathlib import Path
from typing import Any

from spica_lib.base.versions import package_versions
from spica_lib.config import OptimizationTarget, SmartSearchConfig
from spica_lib.config.presets import CompositeEntry
from spica_lib.traces.scan import scan_trace
from spica_lib.facts.kv_capacity import KvEstimator
from spica_lib.facts.parallel import ParallelConfig
from spica_lib.replay.plan import build_deployment, checked_by_dynamo, role_sku
from spica_lib.replay.request import PaceCheckpoint, ReplayOutcome, ReplayRequest, replay_call
from spica_lib.replay.sla_adjust import adjusted_metrics, adjustment_fields, scored_sla
from spica_lib.replay.warm_up import warm_up
from spica_lib.replay.worker import ChildOutcome, ReplayWorker
from spica_lib.trial.kv_load import InfeasibleKVCapacity, resolve_kv_load
from spica_lib.trial.score import average_gpus, cost_metrics, make_candidate, sla_miss, sla_misses
from spica_lib.trial.screen import PruneBar, prune_rules, screen_plan
from spica_lib.trial.sla_margin import sla_adjustment
from spica_lib.trial.spec import TrialResult, TrialSpec, TrialStatus, WorkloadReplay
from spica_lib.trial.unroll import as_round_robin, unroll_sample
from spica_lib.trial.workloads import combine_workloads, part_key, split_part_key

GOODPUT_KEY = "goodput_output_throughput_tok_s"
SLA_COVERAGE = "sla_coverage"  # the share of requests that met every SLA bound (Dynamo's goodput requests)


def prepare_trial(
    config: SmartSearchConfig,
    selection: dict[str, Any],
    parallel_config: ParallelConfig,
    *,
    backend_version: str,
    estimator: KvEstimator | None = None,
    predictor_winners: dict[float, CompositeEntry] | None = None,
) -> TrialSpec:
    """Unroll, size the load and build the plan. Raises InfeasibleKVCapacity or a build error."""
    workload, goal = config.workload.search_part(), config.goal  # a trace's held-out part is the finish's
    sample = unroll_sample(config.search_space, selection, parallel_config, predictor_winners)
    sample["backend_version"] = backend_version
    scale = config.calibration.scales.get(selection["backend"]) if config.calibration is not None else None
    if scale is not None:  # recorded in the sample, so every trial file says how it was timed
        sample.update(
            prefill_step_scale=scale.prefill, decode_step_scale=scale.decode, calibration=config.calibration.source
        )
    concurrency = workload.concurrency
    if "kv_load_ratio" in selection:
        if estimator is None:
            raise ValueError("a kv_load_ratio candidate needs a KV estimator")
        load = resolve_kv_load(sample, workload, parallel_config, selection["kv_load_ratio"], estimator)
        concurrency = load.concurrency
        sample["kv_load_ratio"] = load.ratio
        sample["kv_load_concurrency_capacity"] = load.concurrency_capacity
        sample["kv_load_capacity_tokens"] = load.role_capacity_tokens[load.load_role]
        sample.update({f"{role}_kv_capacity_tokens": tokens for role, tokens in load.role_capacity_tokens.items()})
    if concurrency is not None:
        sample["concurrency"] = concurrency
    sla = goal.sla
    plan_for = partial(
        build_deployment,
        backend_version=backend_version,
        optimization_target=goal.target.planner_optimization_target,
        sla_ttft_ms=sla.ttft_ms if sla else None,
        sla_itl_ms=sla.itl_ms if sla else None,
    )
    plan = plan_for(sample)
    notes = []
    if plan.router_mode == "kv_router" and plan.routing_targets < 2:
        # With one target per role there is nothing to choose between: the KV router routes like round
        # robin (the replay refuses it in agg, and can crawl with it in disagg). The sample says what ran,
        # so its weights drop out of the trial key and a variant that differs only in them is a cache hit.
        sample = as_round_robin(sample)
        plan = plan_for(sample)
        notes.append("kv_router with a single worker/DP rank per role replayed as round_robin (nothing to choose)")
    trace = workload.trace_path
    adjust = sla_adjustment(config, selection["backend"], workload.effective_in_flight_cap(concurrency) is not None)
    sample.update(adjustment_fields(adjust))  # every trial file says what was added beyond the replay
    return TrialSpec(
        workloads=_workload_replays(config, plan, selection["backend"]),
        deployment_mode=selection["deployment_mode"],
        selection=selection,
        parallel_config=parallel_config,
        sample=sample,
        replay=ReplayRequest(
            plan=plan,
            workload=workload,
            concurrency=concurrency,
            sla=sla,
            screen=screen_plan(config, concurrency, workload),
            adjust=adjust,
        ),
        goal=goal,
        gpu_budget=config.search_space.gpu_budget,
        trace_sha256=scan_trace(trace).sha256 if trace else None,
        notes=notes,
    )


def _workload_replays(config: SmartSearchConfig, plan: Any, backend: str) -> list[WorkloadReplay] | None:
    """With several workloads, the replay request of each (the same deployment, its own traffic)."""
    mix = config.workloads
    if mix is None:
        return None
    parts = []
    for named in mix:
        traffic = named.traffic().search_part()
        request = ReplayRequest(
            plan=plan,
            workload=traffic,
            concurrency=traffic.concurrency,
            sla=config.goal.sla,
            screen=screen_plan(config, traffic.concurrency, traffic),
            adjust=sla_adjustment(config, backend, traffic.effective_in_flight_cap(traffic.concurrency) is not None),
        )
        trace = traffic.trace_path
        parts.append(
            WorkloadReplay(
                name=named.name,
                weight=float(named.weight or 1.0),
                replay=request,
                trace_sha256=scan_trace(trace).sha256 if trace else None,
            )
        )
    return parts


def rejected_before_replay(status: TrialStatus, reason: str, used_gpus: int) -> TrialResult:
    """A trial that never reached the replay (unsupported pair, KV infeasible, build error)."""
    return TrialResult(status=status, reason=reason, used_gpus=used_gpus, versions=package_versions())


def prepare_failure(exc: Exception, used_gpus: int) -> TrialResult:
    if isinstance(exc, InfeasibleKVCapacity):
        return rejected_before_replay("infeasible", f"candidate KV capacity infeasible: {exc}", used_gpus)
    return rejected_before_replay("failed", f"candidate build failed: {type(exc).__name__}: {exc}", used_gpus)


def over_budget(used_gpus: int, gpu_budget: int) -> str | None:
    """Why a layout is over the GPU budget, or None when it fits (the one budget gate: search and trial use it)."""
    if used_gpus <= gpu_budget:
        return None
    return f"over gpu_budget: used_gpus={used_gpus} > gpu_budget={gpu_budget}"


def evaluate_trials(
    specs: dict[str, TrialSpec],
    *,
    max_eval_seconds: float | None = None,
    parallel: int = 1,
    warm: bool = False,
    per_request: dict[str, str] | None = None,
    on_warm: Callable[[float], None] | None = None,
    on_start: Callable[[str], None] | None = None,
    prune: PruneBar | Mapping[str, PruneBar] | None = None,
    prefix_seconds: float | None = None,
) -> Iterator[tuple[str, TrialResult]]:
    """Gate, replay and score trials (key -> spec), `parallel` at a time; yield each result as it ends.

    Every replay runs in a child forked from this process, killed at `max_eval_seconds`. With
    `warm`, Dynamo and the perf DBs the trials need are loaded here first, so no child pays for
    them. With `prune` (the round's bar, or a bar by key), a goodput trial whose score certainly stays
    below it is stopped and recorded `pruned`. `prefix_seconds` (the round's prefix budget, replay/stall.py) times out a
    replay whose prefix takes longer. Never raises for a bad candidate: the result says what happened.
    """
    refused, calls = _replay_calls(specs, prune, prefix_seconds)
    yield from refused.items()
    if not calls:
        return
    # A trial on several workloads is one replay per workload; its result waits for all of them.
    parts: dict[str, dict[str, TrialResult]] = {}
    started = set()

    def start(call_key: str) -> None:
        key = split_part_key(call_key)[0]
        if on_start is not None and key not in started:
            started.add(key)
            on_start(key)

    with ReplayWorker(parallel=parallel, timeout=max_eval_seconds) as worker:
        if warm:
            seconds = worker.warm(calls)
            if on_warm is not None:
                on_warm(seconds)
        for outcome in worker.run(calls, per_request, start):
            key, name = split_part_key(outcome.key)
            spec = specs[key]
            if name is None:
                yield key, score_replay(spec, outcome)
                continue
            part = next(p for p in spec.workloads or [] if p.name == name)
            parts.setdefault(key, {})[name] = score_replay(spec.on_workload(part), outcome)
            if len(parts[key]) == len(spec.workloads or []):
                yield key, combine_workloads(spec, parts.pop(key))


def warm_up_trials(specs: dict[str, TrialSpec]) -> float:
    """Load Dynamo and the perf DBs these trials need into this process, once; return the seconds spent."""
    return warm_up(_replay_calls(specs)[1])


def _replay_calls(
    specs: dict[str, TrialSpec],
    prune: PruneBar | Mapping[str, PruneBar] | None = None,
    prefix_seconds: float | None = None,
) -> tuple[dict[str, TrialResult], dict[str, dict[str, Any]]]:
    """The trials refused before any replay (key -> result), and the replay calls of the others. A trial
    on several workloads is never pruned (its score combines them; each part's bound is not the score's)."""
    refused, calls = {}, {}
    for key, spec in specs.items():
        problem = before_replay_problem(spec)
        if problem is not None:
            refused[key] = problem
        elif spec.workloads:
            calls.update({part_key(key, part.name): replay_call(part.replay) for part in spec.workloads})
        else:
            bar = prune.get(key) if isinstance(prune, Mapping) else prune
            calls[key] = replay_call(spec.replay, prune_rules(spec.goal, spec.replay, spec.used_gpus, bar))
    if prefix_seconds is not None:
        for call in calls.values():
            if call.get("stop"):
                call["stop"]["prefix_seconds"] = prefix_seconds
    return refused, calls


def before_replay_problem(spec: TrialSpec) -> TrialResult | None:
    """The result of a trial that must not be replayed: over the GPU budget, or a planner Dynamo refuses."""
    over = over_budget(spec.used_gpus, spec.gpu_budget)
    if over:
        return rejected_before_replay("infeasible", over, spec.used_gpus)
    planner = spec.replay.plan.planner_config
    if planner is not None:
        try:
            checked_by_dynamo(planner)
        except ValueError as exc:
            return rejected_before_replay(
                "failed", f"Dynamo's PlannerConfig refused the planner: {exc}", spec.used_gpus
            )
    return None


def evaluate_trial(
    spec: TrialSpec, *, max_eval_seconds: float | None = None, per_request_path: str | None = None
) -> TrialResult:
    """Replay and score one trial (in one child, with no warm-up: there is nothing to share it with)."""
    per_request = None
    if per_request_path:
        path = Path(per_request_path).resolve()
        per_request = {"trial": str(path)}
        # Several workloads: one file per workload, named after it (requests.parquet -> requests.day.parquet).
        for part in spec.workloads or []:
            per_request[part_key("trial", part.name)] = str(path.with_name(f"{path.stem}.{part.name}{path.suffix}"))
    results = evaluate_trials({"trial": spec}, max_eval_seconds=max_eval_seconds, per_request=per_request)
    return next(result for _, result in results)


def score_replay(spec: TrialSpec, run: ChildOutcome) -> TrialResult:
    """The trial result of a finished child: its failure, or its metrics scored for the goal."""
    base = {
        "used_gpus": spec.used_gpus,
        "wall_seconds": run.wall_seconds,
        "cpu_seconds": run.cpu_seconds,
        "versions": package_versions(),
    }
    if run.status == "timed_out" and run.checkpoint is not None:
        return _timed_out_after_prefix(run, base)
    if run.status != "ok":
        return TrialResult(status=run.status, reason=run.reason, **base)
    outcome = ReplayOutcome.model_validate(run.report["outcome"])
    if outcome.stop is not None:
        return _stopped(spec, outcome, base)
    # A NaN or infinite number has no JSON form: written, it would come back as null and the trial
    # file (and its journal entry, restored on every retry) would never load again.
    metrics = adjusted_metrics({k: v for k, v in outcome.metrics.items() if math.isfinite(v)}, spec.replay.adjust)
    timing = {
        "replay_seconds": outcome.replay_seconds,
        "scaling_events": outcome.scaling_events,
        "checkpoint": outcome.checkpoint,
    }
    broken = sorted(set(outcome.metrics) - set(metrics))
    if broken:
        reason = f"replay reported non-finite metric(s) {broken}"
        return TrialResult(status="failed", reason=reason, metrics=metrics, **base, **timing)
    price = _price(spec)
    if price is not None:
        metrics.update(cost_metrics(metrics, price))
    if spec.replay.sla is not None and metrics.get("num_requests"):
        metrics[SLA_COVERAGE] = metrics.get("goodput_completed_requests", 0.0) / metrics["num_requests"]
    needs_goodput = [t for t in spec.goal.objectives if t.needs_sla]
    if needs_goodput and GOODPUT_KEY not in metrics:
        reason = f"replay reported no {GOODPUT_KEY} for a goodput objective (no per-request SLA accounting)"
        return TrialResult(status="failed", reason=reason, metrics=metrics, **base, **timing)
    target = spec.goal.target
    objectives = spec.goal.resolved_pareto_objectives if target is OptimizationTarget.PARETO else None
    candidate = make_candidate(spec.sample, metrics, target, objectives)
    if not all(math.isfinite(v) for v in (candidate.score, *(candidate.objectives or {}).values())):
        reason = f"the goal's score is not finite ({candidate.score}): the replay reported no metric it needs"
        return TrialResult(status="failed", reason=reason, metrics=metrics, **base, **timing)
    goal = spec.goal.model_copy(update={"sla": scored_sla(spec.goal.sla, spec.replay.adjust)})  # its safety margin
    miss = sla_miss(metrics, goal) if goal.sla is not None else None
    misses = sla_misses(metrics, goal) if goal.sla is not None and goal.sla.is_constraint else []
    reasons = [f"misses the {goal.sla.statistic} SLA: {', '.join(misses)}"] if misses else []
    if goal.sla_coverage is not None:
        coverage = metrics.get(SLA_COVERAGE, 0.0)
        short = goal.coverage_miss(coverage)
        miss = max(short, miss if goal.sla.is_constraint else 0.0)
        if short > 1.0:
            reasons.append(
                f"{100 * coverage:.1f} % of requests meet every SLA bound, under the "
                f"{100 * goal.sla_coverage:g} % floor (goal.sla_coverage)"
            )
    return TrialResult(
        status="infeasible" if reasons else "feasible",
        reason="; ".join(reasons) or None,
        metrics=candidate.metrics,
        objectives=candidate.objectives,
        score=candidate.score,
        average_gpus=average_gpus(metrics),
        sla_miss=miss,
        **base,
        **timing,
    )


def _price(spec: TrialSpec) -> float | dict[str, float] | None:
    """The GPU-hour price: one, or one per disagg role when its roles' GPU types are priced differently."""
    roles = ["agg"] if spec.deployment_mode == "agg" else ["prefill", "decode"]
    prices = {role: spec.goal.gpu_hour_price(role_sku(spec.sample, role)) for role in roles}
    if any(price is None for price in prices.values()):
        return None
    return next(iter(prices.values())) if len(set(prices.values())) == 1 else prices


def _stopped(spec: TrialSpec, outcome: ReplayOutcome, base: dict[str, Any]) -> TrialResult:
    """A replay stopped early on a sound bound (replay/early_stop.py): infeasible when a hard constraint is
    certain to miss, pruned when its score cannot reach the round's bar. Its metrics stay empty: what it
    covered is in `stop`, under names that say so, and never flows into rankings, capacity points or plots.

    A certain miss is told to the designer as the share of requests certainly past the bound over the share
    the constraint allows (at least 1; the coverage floor's own ratio, goal.coverage_miss), a lower bound
    on how far it missed."""
    stop = outcome.stop
    common = {"stop": stop, "checkpoint": outcome.checkpoint, "replay_seconds": outcome.replay_seconds, **base}
    if stop.rule == "prune":
        return TrialResult(status="pruned", reason=f"pruned: {stop.why}", **common)
    goal = spec.goal
    allowed = 1.0 - float(goal.sla_coverage) if stop.rule == "coverage" else 1.0 - float(goal.sla.percentile) / 100
    miss = (stop.certain_misses / stop.requests) / max(allowed, 1e-3)
    rule = f"the {100 * goal.sla_coverage:g} % coverage floor" if stop.rule == "coverage" else f"the {goal.sla.statistic} SLA"
    return TrialResult(status="infeasible", reason=f"stopped early, certain to miss {rule}: {stop.why}",
                       sla_miss=max(1.0, miss), **common)  # fmt: skip


def _timed_out_after_prefix(run: ChildOutcome, base: dict[str, Any]) -> TrialResult:
    """A replay stopped for its time (at its limit, or stalled) after its pace checkpoint: say where it got.

    The simulator's cost per request grows with the queue (a deep queue made one replay 20x slower
    per request), so a replay that ran its prefix quickly and then ran out of time had a queue that
    kept growing. That is what it saw, not a verdict on the SLA: nothing is told as a miss.
    """
    checkpoint = PaceCheckpoint.model_validate(run.checkpoint)
    rest = max(1.0, (run.wall_seconds - checkpoint.replay_seconds) / max(checkpoint.replay_seconds, 1e-3))
    reason = (
        f"{run.reason}; its prefix ({checkpoint.prefix}) was done by {checkpoint.at_sim_ms / 1000:.0f} s simulated "
        f"in {checkpoint.replay_seconds:.2f} s, and the rest then took over {rest:.0f}x that"
    )
    return TrialResult(status="timed_out", reason=reason, checkpoint=checkpoint, **base)


def killed_outside(spec: TrialSpec, attempt: int, job_error: str = "") -> TrialResult:
    """The result of a trial an earlier job started and never finished.

    Replay errors and our own timeout are always written as results, so a job that leaves no result
    either failed in our own code (`job_error`, which the job wrote down as it died) or was killed
    from outside (a scheduler time limit, a node failure, scancel, the OOM killer). The last attempt
    records that instead of replaying, so the round can be told and the sweep goes on.
    """
    if job_error:
        reason = f"the replay job failed in {attempt - 1} attempt(s); last error: {job_error}"
    else:
        reason = (
            f"killed outside the replay in {attempt - 1} attempt(s) (scheduler time limit, node failure, "
            "cancellation or out of memory); see the replay job's log"
        )
    return TrialResult(status="failed", reason=reason, used_gpus=spec.used_gpus, versions=package_versions())
