"""`spica`: command-line entry points around the library (the workflow itself runs in Snakemake).

spica validate FILE   check a config; print what would be searched (exit 2 on a bad config)
spica schema          JSON Schema of the config file, for editors
"""

from __future__ import annotations

import argparse
import json
import sys

from spica_lib.branches import Branch, NoViableParallelConfig, enumerate_branches
from spica_lib.config import ConfigError, SmartSearchConfig
from spica_lib.knobs import branch_knob_choices, combinations
from spica_lib.policies import apply_policy_filters
from spica_lib.validate import ValidatedConfig, build_validated_config

EXIT_OK, EXIT_CONFIG = 0, 2


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="spica", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    check = commands.add_parser("validate", help="check a config and summarise the search it describes")
    check.add_argument("config", help="path to a SmartSearchConfig YAML file")
    pools = commands.add_parser("pools", help="build the candidate pools and say what was dropped")
    pools.add_argument("config", help="path to a SmartSearchConfig YAML file")
    evaluate = commands.add_parser("evaluate", help="replay and score one hand-written candidate")
    evaluate.add_argument("config", help="path to a SmartSearchConfig YAML file")
    evaluate.add_argument("--candidate", required=True, help="candidate as a JSON/YAML file or inline JSON")
    evaluate.add_argument("--json", action="store_true", help="print the whole trial record as JSON")
    evaluate.add_argument("--per-request", metavar="PARQUET", help="also write one row per request to this file")
    run = commands.add_parser("run", help="run or resume the sweep with Snakemake")
    run.add_argument(
        "config", nargs="?", default="config/default.yaml", help="config file (default: config/default.yaml)"
    )
    run.add_argument("--cores", type=int, default=None, help="local cores (default: 2, or the profile's)")
    run.add_argument("--profile", help="a Snakemake profile folder, e.g. profiles/slurm")
    run.add_argument("--run", dest="run_name", help="name the run folder instead of using the config hash")
    run.epilog = "Anything after a lone `--` goes to Snakemake unchanged, e.g. `spica run c.yaml -- --dry-run`."
    commands.add_parser("schema", help="print the JSON Schema of the config file")
    argv = list(sys.argv[1:] if argv is None else argv)
    # Split off Snakemake's arguments ourselves: argparse's REMAINDER would also swallow our own options
    # given after the config path (`spica run c.yaml --profile p` must not hand --profile to Snakemake).
    cut = argv.index("--") if "--" in argv else len(argv)
    args, extra = parser.parse_args(argv[:cut]), argv[cut + 1 :]
    if extra and args.command != "run":
        parser.error("arguments after `--` are only for `spica run`")
    if args.command == "run":
        from spica_lib.launcher import run_sweep

        cores = args.cores if args.cores is not None else (None if args.profile else 2)
        return run_sweep(args.config, cores=cores, profile=args.profile, run=args.run_name, extra=extra)
    if args.command == "evaluate":
        return _evaluate(args.config, args.candidate, args.json, args.per_request)
    if args.command == "schema":
        print(json.dumps(SmartSearchConfig.model_json_schema(), indent=2))
        return EXIT_OK
    if args.command == "pools":
        return _pools(args.config)
    return _validate(args.config)


def _pools(path: str) -> int:
    try:
        validated = build_validated_config(path)
        policies = apply_policy_filters(validated.config)
        branches = enumerate_branches(validated.config, policies.kept)
    except (ConfigError, NoViableParallelConfig) as error:
        print(error, file=sys.stderr)
        return EXIT_CONFIG
    print(pools_report(validated, branches))
    return EXIT_OK


def pools_report(validated: ValidatedConfig, branches: list[Branch]) -> str:
    ss = validated.config.search_space
    spec0 = branches[0].spec
    lines = [
        f"{ss.model_name} on {ss.hardware_sku}, gpu_budget {ss.gpu_budget}, sequences of {spec0.max_seq_len} tokens"
    ]
    for branch in branches:
        spec = branch.spec
        sizes = ", ".join(f"{b} {n}" for b, n in spec.pool_size_by_backend.items())
        lines.append(
            f"  {spec.deployment_mode:<7} {spec.status}: {spec.pool_size} layouts" + (f" ({sizes})" if sizes else "")
        )
        for skipped in spec.skipped_backends:
            lines.append(f"          backend {skipped.backend} left out: {skipped.reason}")
        for dropped in spec.dropped_shapes:
            lines.append(f"          {dropped.backend} {dropped.role} {dropped.shape} dropped: {dropped.reason}")
    return "\n".join(lines)


def _validate(path: str) -> int:
    try:
        validated = build_validated_config(path)
    except ConfigError as error:
        print(error, file=sys.stderr)
        return EXIT_CONFIG
    print(summary(path, validated))
    return EXIT_OK


def summary(path: str, validated: ValidatedConfig) -> str:
    """One screen: what will be searched, against what traffic, for which goal."""
    config = validated.config
    ss, sweep = config.search_space, config.sweep
    policies = apply_policy_filters(config)
    versions = validated.catalog.perf_db_versions
    backends = ", ".join(f"{b} (perf DB {v})" if v else f"{b} (no perf DB: skipped)" for b, v in versions.items())
    lines = [
        f"{path}: valid — run id {validated.run}",
        f"  model      {ss.model_name} on {ss.hardware_sku}, gpu_budget {ss.gpu_budget}"
        + (f" (at least {ss.min_gpu_budget})" if ss.min_gpu_budget else ""),
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
    for mode in dict.fromkeys(ss.deployment_mode):
        choices = branch_knob_choices(ss, mode, policies.kept)
        searched = {k: str(len(v)) for k, v in choices.items() if len(v) > 1}
        if config.workload.kv_load_ratio_range:
            searched["kv_load_ratio"] = "continuous {} to {}".format(*config.workload.kv_load_ratio_range)
        pool = "pinned parallel configs" if ss.parallel_configs else "all legal parallel layouts"
        lines.append(
            f"    {mode:<7} {combinations(choices)} knob combinations x {pool}; searched: "
            + (", ".join(f"{k} ({n})" for k, n in searched.items()) or "none")
        )
    lines.append(
        f"  sweep      {sweep.max_rounds} rounds x {sweep.per_round} candidates per branch, "
        f"algorithm {sweep.algorithm}, seed {sweep.seed}, top {sweep.top_k} deployments"
    )
    return "\n".join(lines)


def _workload_line(config: SmartSearchConfig) -> str:
    w = config.workload
    if w.is_trace_based:
        loop = f"closed loop at {w.replay_concurrency} in flight" if w.replay_concurrency else "open loop"
        return f"trace {w.trace_path} ({loop}, speed-up x{w.arrival_speedup_ratio})"
    if w.request_rate is not None:
        load = f"{w.request_rate} req/s open loop, {w.resolved_request_count()} requests"
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
    bounds = {k: v for k, v in goal.sla.model_dump().items() if v is not None}
    return f"{head}, SLA " + ", ".join(f"{k} {v}" for k, v in bounds.items())


def _label(policy: object) -> str:
    return policy if isinstance(policy, str) else "custom"


if __name__ == "__main__":
    sys.exit(main())


def _evaluate(path: str, candidate: str, as_json: bool, per_request: str | None) -> int:
    from spica_lib.candidate_input import candidate_selection, read_candidate
    from spica_lib.catalog import resolve_backend_version
    from spica_lib.kv_capacity import KvEstimator
    from spica_lib.trial import TrialRecord, evaluate_trial, prepare_failure, prepare_trial

    try:
        validated = build_validated_config(path)
        config = validated.config
        selection, parallel = candidate_selection(config, read_candidate(candidate))
    except ConfigError as error:
        print(error, file=sys.stderr)
        return EXIT_CONFIG
    ss = config.search_space
    version = resolve_backend_version(ss.hardware_sku, selection["backend"])
    if version is None:
        print(f"no perf database for backend {selection['backend']} on {ss.hardware_sku}", file=sys.stderr)
        return EXIT_CONFIG
    estimator = KvEstimator(ss.model_name, ss.hardware_sku, {selection["backend"]: version})
    try:
        spec = prepare_trial(config, selection, parallel, backend_version=version, estimator=estimator)
    except Exception as exc:  # a candidate that cannot be built is reported like the search reports it
        result = prepare_failure(exc, parallel.total_gpus)
        print(f"{result.status}: {result.reason}")
        return 1
    result = evaluate_trial(spec, max_eval_seconds=config.sweep.max_eval_seconds, per_request_path=per_request)
    if as_json:
        print(TrialRecord(key=spec.key(), spec=spec, result=result).model_dump_json(indent=2))
    else:
        print(trial_report(spec, result))
    return EXIT_OK if result.status == "feasible" else 1


def trial_report(spec, result) -> str:
    lines = [f"{spec.parallel_config.label()} on {spec.sample['backend']} ({spec.deployment_mode}): {result.status}"]
    if result.reason:
        lines.append(f"  reason     {result.reason}")
    lines += [f"  note       {note}" for note in spec.notes]
    if result.score is not None:
        head = f"  score      {result.score:.4g} ({spec.goal.target.value})"
        if result.objectives:
            head += "  objectives " + ", ".join(f"{k} {v:.4g}" for k, v in result.objectives.items())
        lines.append(head)
    from spica_lib.merge import HEADLINE_METRICS

    shown = (*HEADLINE_METRICS, "prefix_cache_reused_ratio")
    for key in shown:
        if key in result.metrics:
            lines.append(f"  {key:<38} {result.metrics[key]:.4g}")
    if result.average_gpus is not None:
        lines.append(f"  {'average_gpus':<38} {result.average_gpus:.3g} (provisioned {result.used_gpus})")
    for event in result.scaling_events:
        lines.append(f"  planner    t={event.at_s:.0f}s {event.component} {event.from_count} -> {event.to_count}")
    lines.append(f"  replay     {result.replay_seconds:.2f} s in the simulator, {result.wall_seconds:.2f} s wall")
    return "\n".join(lines)
