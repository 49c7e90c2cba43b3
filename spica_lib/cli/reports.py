"""What the `spica` commands print: the config summary, the pools report and a trial report."""

from __future__ import annotations

from spica_lib.config import SmartSearchConfig, Workload
from spica_lib.config.policies import apply_policy_filters
from spica_lib.config.finish_settings import rare_event_share
from spica_lib.config.validate import ValidatedConfig
from spica_lib.pools.branches import Branch
from spica_lib.pools.knobs import branch_knob_choices, combinations
from spica_lib.predictor.plan import window_warnings
from spica_lib.replay.stall import STALL_FACTOR
from spica_lib.results.finish import sample_kind
from spica_lib.results.rare_events import samples_to_see


def pools_report(validated: ValidatedConfig, branches: list[Branch]) -> str:
    space = validated.config.search_space
    spec0 = branches[0].spec
    lines = [
        f"{space.model_name} on {space.hardware_text()}, sequences of {spec0.max_seq_len} tokens"
    ]
    for branch in branches:
        spec = branch.spec
        sizes = ", ".join(f"{b} {n}" for b, n in spec.pool_size_by_backend.items())
        lines.append(
            f"  {spec.deployment_mode:<7} {spec.status}: {spec.pool_size} layouts" + (f" ({sizes})" if sizes else "")
        )
        for skipped in spec.skipped_backends:
            lines.append(f"          backend {skipped.backend} left out: {skipped.reason}")
        for limited in spec.replay_limited:
            lines.append(f"          {limited.line(spec.deployment_mode)}")
        for dropped in spec.dropped_shapes:
            lines.append(f"          {dropped.backend} {dropped.role} {dropped.shape} dropped: {dropped.reason}")
    return "\n".join(lines)


def summary(path: str, validated: ValidatedConfig, branches: list[Branch]) -> str:
    """One screen: what will be searched, against what traffic, for which goal."""
    config = validated.config
    space, sweep = config.search_space, config.sweep
    policies = apply_policy_filters(config)
    versions = validated.catalog.perf_db_versions
    backends = ", ".join(f"{b} (perf DB {v})" for b, v in versions.items())
    lines = [
        f"{path}: valid — run id {validated.run}",
        f"  model      {space.model_name} on {space.hardware_text()}"
        + (f" (at least {space.min_gpu_budget})" if space.min_gpu_budget else ""),
        f"  backends   {backends}",
        f"  workload   {_workload_line(config)}",
        f"  goal       {_goal_line(config)}",
        f"  policies   kept {[_label(p) for p in policies.kept]}"
        + (
            f", dropped {[d.label for d in policies.dropped]} ({policies.dropped[0].reason})"
            if policies.dropped
            else ""
        ),
        "  branches",
    ]
    for branch in branches:
        mode, spec = branch.spec.deployment_mode, branch.spec
        choices = branch_knob_choices(space, mode, policies.kept)
        searched = {k: str(len(v)) for k, v in choices.items() if len(v) > 1}
        if config.workload.kv_load_ratio_range:
            searched["kv_load_ratio"] = "continuous {} to {}".format(*config.workload.kv_load_ratio_range)
        pool = "pinned" if spec.pinned else "memory-feasible"
        by_backend = ", ".join(f"{b} {n}" for b, n in spec.pool_size_by_backend.items())
        lines.append(
            f"    {mode:<7} {combinations(choices)} knob combinations x {spec.pool_size} {pool} layouts "
            f"({by_backend}); searched: " + (", ".join(f"{k} ({n})" for k, n in searched.items()) or "none")
        )
        lines += [f"            {s.backend} left out: {s.reason}" for s in spec.skipped_backends]
        lines += [f"            {limited.line(mode)}" for limited in spec.replay_limited]
    lines.append(
        f"  sweep      {sweep.max_rounds} rounds x {sweep.per_round} candidates per branch, "
        + (f"{sweep.rounds_in_flight} rounds in flight, " if sweep.rounds_in_flight > 1 else "")
        + f"algorithm {sweep.algorithm}, seed {sweep.seed}, top {sweep.top_k} deployments; "
        + ("round 0 warm-started from the static estimate" if sweep.warm_start else "no warm start")
    )
    lines.append(f"  limits     {_limit_line(config)}")
    lines.append(
        "  baselines  "
        + (
            "aiconfigurator's pick, the best without the planner, the best with the default router"
            if sweep.baselines
            else "none"
        )
    )
    lines.append(f"  finish     {_finish_line(config)}")
    if sweep.stress_top:
        lines.append(f"  stress     the top {sweep.stress_top} with step times +/- {100 * (sweep.stress_band or 0):.0f} % "
                     f"(the band: {sweep.stress_band_source})")  # fmt: skip
    calibration = config.calibration
    if calibration is not None:
        lines.append(f"  calibrated {calibration.describe()} (step times; {calibration.file})")
    if config.dgdr is not None:
        lines.append("  DGDR       mapped onto the settings above; each field defaulted or reinterpreted, "
                     "as DGDR field -> Spica setting:")  # fmt: skip
        lines += [f"             {line}" for line in config.dgdr.mapping]
    if config.adapters_alias is not None:
        lines.append("  adapters   upstream Spica's adapters: section, read as Spica's own knobs (docs/config.md), "
                     "as adapter path -> Spica setting:")  # fmt: skip
        lines += [f"             {line}" for line in config.adapters_alias.mapping]
    warnings = config.sample_size_warnings() + window_warnings(config, policies.kept)
    lines += [f"  warning    {warning}" for warning in warnings]
    return "\n".join(lines)


def _finish_line(config: SmartSearchConfig) -> str:
    sweep, goal = config.sweep, config.goal
    kind = sample_kind(config)
    if kind is None:
        return "none (a Pareto goal, switched off, or every replay here is exact)"
    samples = {
        "arrival": "fresh arrival samples",
        "bootstrap": "resamples of the trace (blocks of time)",
        "holdout": "replays of the held-out traffic",
        "repeat": "repeated replays of the KV-router deployments",
    }[kind]
    most = sweep.finish_max_samples
    count = f"{sweep.finish_samples}" if most == sweep.finish_samples else f"{sweep.finish_samples} to {most}"
    margin = goal.equivalence_margin.text() if goal.equivalence_margin is not None else "—"
    share = rare_event_share(config)
    rare = (
        f", on at least {samples_to_see(share)} compared samples (goal.rare_event_share {100 * share:g} %: a "
        "failure on that share of windows would have shown)"
        if share is not None
        else ""
    )
    return (
        f"the top {sweep.finish_top} distinct deployments on {count} {samples} each (sequential), ranked by "
        f"their {goal.robustness}; equivalent within {margin} of the best at 95 %{rare}"
    )


def _limit_line(config: SmartSearchConfig) -> str:
    sweep = config.sweep
    counts = [w.expected_requests() for w in config.workloads or [config.workload]]
    requests = None if None in counts else "/".join(str(c) for c in counts)
    size = f"{requests} requests per replay" if requests is not None else "request count set per candidate"
    line = f"{sweep.max_eval_seconds:g} s per trial ({size})"
    if config.goal.sla is None or sweep.screen_fraction is None:
        return line + "; no early stops" + (" (no SLA to stop against)" if config.goal.sla is None else "")
    goal = config.goal
    rules = [f"certain to miss the {goal.sla.statistic} SLA"] if goal.sla.is_constraint else []
    rules += ["certain to miss the coverage floor"] if goal.sla_coverage is not None else []
    rules += ["certain to stay below the sweep's top scores"] if not goal.is_pareto and goal.target.needs_sla else []
    return (
        line + f"; stopped early when {' or '.join(rules) or 'never (no rule for this goal)'}; paced by the "
        f"first {sweep.screen_fraction:.0%} of the requests (past its share of the limit, or later past "
        f"{STALL_FACTOR:g}x its pace: timed out)"
    )


def _workload_line(config: SmartSearchConfig) -> str:
    mix = config.workloads
    if mix is None:
        return _traffic(config.workload)
    how = "scored by the weighted mean" if config.goal.workload_score == "weighted_mean" else "scored by the worst"
    parts = "; ".join(
        f"{w.name}{f' (weight {w.weight:g})' if w.weight is not None else ''}: {_traffic(w)}" for w in mix
    )
    return f"{len(mix)} workloads, each candidate replayed on every one and {how}: {parts}"


def _traffic(w: Workload) -> str:
    if w.is_trace_based:
        loop = f"closed loop at {w.replay_concurrency} in flight" if w.replay_concurrency else "open loop"
        return f"trace {w.trace_path} ({loop}, speed-up x{w.arrival_speedup_ratio})"
    if w.request_rate is not None:
        load = (
            f"{w.request_rate} req/s open loop, {w.resolved_request_count()} requests, arrival sample {w.arrival_seed}"
        )
    elif w.concurrency is not None:
        load = f"{w.concurrency} in flight, {w.resolved_request_count()} requests"
    else:
        load = f"kv_load_ratio {w.kv_load_ratio} of each candidate's KV capacity"
    return f"synthetic isl {w.isl} / osl {w.osl}, {load}"


def _goal_line(config: SmartSearchConfig) -> str:
    goal = config.goal
    head = f"pareto over {[t.value for t in goal.resolved_pareto_objectives]}" if goal.is_pareto else goal.target.value
    if goal.sla is None:
        return head
    bounds = ", ".join(f"{metric} ≤ {bound:g} ms" for metric, bound in goal.sla.bounds())
    meaning = (
        "a hard constraint on every candidate" if goal.sla.is_constraint else "goodput per request, as Dynamo counts it"
    )
    return f"{head}, SLA {bounds} ({meaning})"


def _label(policy: object) -> str:
    return policy if isinstance(policy, str) else "custom"


def trial_report(spec, result, fresh=None, target=None) -> str:
    """One trial: its outcome on the search's sample; for a deployment the finish replayed (`fresh`, a
    FinishedRank), its fresh-sample score and metrics first, the search sample's beside them."""
    lines = [f"{spec.parallel_config.label()} on {spec.sample['backend']} ({spec.deployment_mode}): {result.status}"]
    if result.reason:
        lines.append(f"  reason     {result.reason}")
    lines += [f"  note       {note}" for note in spec.notes]
    fresh = fresh if fresh is not None and fresh.statistic is not None else None
    if fresh is not None:
        from spica_lib.trial.score import score_text

        lines.append(f"  score      {score_text(fresh.statistic, target)} fresh ({spec.goal.robustness} of "
                     f"{fresh.scored} fresh sample(s)); {score_text(result.score, target, name=False)} on the "
                     "search's sample")  # fmt: skip
    elif result.score is not None:
        head = f"  score      {result.score:.4g} ({spec.goal.target.value})"
        if result.objectives:
            head += "  objectives " + ", ".join(f"{k} {v:.4g}" for k, v in result.objectives.items())
        lines.append(head)
    from spica_lib.results.merge import HEADLINE_METRICS

    shown = (*HEADLINE_METRICS, "prefix_cache_reused_ratio")
    if fresh is not None:
        lines.append(f"  {'metric':<38} {'fresh mean':>12} {'search sample':>14}")
    for key in shown:
        if fresh is not None and key in fresh.metrics:
            search = f"{result.metrics[key]:.4g}" if key in result.metrics else "—"
            lines.append(f"  {key:<38} {fresh.metrics[key]:>12.4g} {search:>14}")
        elif key in result.metrics:
            lines.append(f"  {key:<38} {'—':>12} {result.metrics[key]:>14.4g}" if fresh is not None
                         else f"  {key:<38} {result.metrics[key]:.4g}")  # fmt: skip
    if result.average_gpus is not None:
        lines.append(f"  {'average_gpus':<38} {result.average_gpus:.3g} (provisioned {result.used_gpus})")
    for event in result.scaling_events:
        lines.append(f"  planner    t={event.at_s:.0f}s {event.component} {event.from_count} -> {event.to_count}")
    lines.append(f"  replay     {result.replay_seconds:.2f} s in the simulator, {result.wall_seconds:.2f} s wall")
    return "\n".join(lines)
