"""`spica`: command-line entry points around the library (the workflow itself runs in Snakemake).

spica run FILE        run or resume a sweep (or, for a fleet config, the fleet) with Snakemake
spica validate FILE   check a config (a sweep's or a fleet's); print what would be searched (exit 2 on a bad config)
spica fleet FILE      several models on one GPU inventory: each model's sweep, then the split between them
spica rehearse RUN    start a ranked deployment for real (mocker workers), send it traffic, compare with its replay
spica status RUN      how far a run is (works while it runs); show / report: one deployment, the report
spica schema          JSON Schema of the config file, for editors (--markdown: the config reference page)
spica fidelity        the replay and the estimates against measured rows: aiconfigurator's silicon (agg, disagg) or yours (--rows)
"""

from __future__ import annotations

import argparse
import json
import sys

from spica_lib.cli.rehearse import add_rehearse_parser, rehearse_command
from spica_lib.cli.reports import pools_report, summary, trial_report
from spica_lib.config import ConfigError, InputKind, SmartSearchConfig, read_input
from spica_lib.config.policies import apply_policy_filters
from spica_lib.config.validate import build_validated_config
from spica_lib.deploy.k8s_names import DEFAULT_NAMESPACE, check_namespace
from spica_lib.fidelity.protocol import PROTOCOLS
from spica_lib.pools.branches import NoViableParallelConfig, enumerate_branches

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
    evaluate.add_argument(
        "--per-request",
        metavar="PARQUET",
        help="also write one row per request to this file (with several workloads: one file per workload, FILE.<name>.parquet)",
    )
    run = commands.add_parser("run", help="run or resume the sweep with Snakemake")
    run.add_argument(
        "config", nargs="?", default="config/default.yaml", help="config file (default: config/default.yaml)"
    )
    run.add_argument("--cores", type=int, default=None, help="local cores (default: 2, or the profile's)")
    run.add_argument("--profile", help="a Snakemake profile folder, e.g. profiles/slurm")
    run.add_argument("--run", dest="run_name", help="name the run folder instead of using the config hash")
    run.add_argument(
        "-n", "--dry-run", action="store_true", help="print the planned stages and rounds; run nothing (Snakemake's -n)"
    )
    run.add_argument(
        "-v", "--verbose", action="store_true",
        help="show Snakemake's own log instead of the progress view (it is in results/<run>/logs/snakemake.log either way)",
    )  # fmt: skip
    run.epilog = "Anything after a lone `--` goes to Snakemake unchanged, e.g. `spica run c.yaml -- --dry-run`."
    fleet = commands.add_parser("fleet", help="several models on one GPU inventory: sweep each, split the GPUs")
    fleet.add_argument("config", help="a fleet config YAML (config/examples/fleet_models.yaml)")
    fleet.add_argument("--cores", type=int, default=None, help="local cores (default: 2)")
    fleet.add_argument("--profile", help="a Snakemake profile folder for each model's sweep, e.g. profiles/slurm")
    fleet.add_argument("--run", dest="run_name", help="name the fleet's folder instead of using the config hash")
    fleet.add_argument("-n", "--dry-run", action="store_true", help="print the planned jobs; run nothing")
    fleet.add_argument(
        "-v", "--verbose", action="store_true",
        help="show Snakemake's own log instead of the fleet's stages (it is in results/<fleet>/logs/snakemake.log "
        "either way; each model's sweep logs to results/<fleet>/models/<model>/logs/snakemake.log)",
    )  # fmt: skip
    status = commands.add_parser("status", help="per branch: rounds told, trials finished/running/failed, best")
    status.add_argument("run", help="a run folder (results/<run>) or a run name")
    show = commands.add_parser("show", help="one deployment of a run: spec, metrics, reason, scaling events")
    show.add_argument("run", help="a run folder (results/<run>) or a run name")
    show.add_argument("which", nargs="?", default="1", help="a rank in the ranking (default 1) or a trial key prefix")
    show.add_argument(
        "--manifests",
        action="store_true",
        help="print the deployment's Kubernetes files instead (its DynamoGraphDeployment and benchmark Jobs), "
        "e.g. to pipe into `kubectl apply -f -`",
    )
    show.add_argument("--namespace", help=f"the namespace --manifests writes for (default {DEFAULT_NAMESPACE})")
    rebuild = commands.add_parser(
        "report", help="rebuild a run's report.md, plots and deployment files (deploy/<rank>/) from its files"
    )
    rebuild.add_argument("run", help="a run folder (results/<run>) or a run name")
    rebuild.add_argument(
        "--namespace",
        default=DEFAULT_NAMESPACE,
        help=f"the Kubernetes namespace the deployment files are written for (default {DEFAULT_NAMESPACE})",
    )
    for flag, what in (("account", "the SLURM account"), ("partition", "the SLURM partition"),
                       ("time", "the job's time limit (minutes, HH:MM:SS or D-HH:MM:SS)"),
                       ("image", "a Dynamo container image the script starts through Pyxis"),
                       ("python-env", "a Python environment with ai-dynamo and the engine installed")):  # fmt: skip
        rebuild.add_argument(f"--slurm-{flag}", help=f"deploy/<rank>/slurm/deploy.sbatch: {what}")
    add_rehearse_parser(commands)
    schema = commands.add_parser("schema", help="print the JSON Schema of the config file")
    schema.add_argument(
        "--markdown",
        action="store_true",
        help="print the config reference as Markdown instead (the documentation site's page; make docs)",
    )
    fidelity = commands.add_parser(
        "fidelity", help="replay measured silicon rows (aiconfigurator's silicon_sample.csv) and report the errors"
    )
    fidelity.add_argument(
        "--mode",
        choices=("agg", "disagg"),
        default="agg",
        help="which of silicon_sample.csv's rows: agg (default) or disagg (capped per group: docs/fidelity/ranking.md)",
    )
    fidelity.add_argument(
        "--system", default=None, help="systems, comma-separated (default: h100_sxm,h200_sxm for agg, all for disagg)"
    )
    fidelity.add_argument("--backend", default=None, help="backends, comma-separated (default: vllm for agg, all for disagg)")
    fidelity.add_argument(
        "--rows",
        metavar="FILE",
        help="your own measured rows instead of the shipped ones: a CSV (silicon_sample.csv's layout, or the "
        "documented one) or an AIPerf profile_export JSON (with --deployment); docs/fidelity/calibration.md",
    )
    fidelity.add_argument(
        "--deployment",
        metavar="YAML",
        help="the deployment an AIPerf export measured (system, backend, model, shape, workers): with --rows EXPORT",
    )
    fidelity.add_argument("--model", default=None, help="models, comma-separated (default: all)")
    fidelity.add_argument("--limit", type=int, default=None, help="at most this many rows per group")
    fidelity.add_argument("--json", metavar="FILE", help="also write every row's check to this JSON file")
    fidelity.add_argument(
        "--ranking",
        action="store_true",
        help="also print, per group of rows measured alike, how well the replay and the static estimate order "
        "them (Kendall's tau, top-1 regret)",
    )
    fidelity.add_argument(
        "--from-json",
        metavar="FILE",
        help="read the rows' checks from a --json FILE of an earlier run instead of replaying them",
    )
    fidelity.add_argument(
        "--protocol",
        choices=sorted(PROTOCOLS),
        default="aiconfigurator-benchmark",
        help="the engine scheduler settings agg rows are replayed with (default: aiconfigurator-benchmark, what "
        "aiconfigurator's generator writes for an agg benchmark of the row's backend; engine-defaults: each engine's "
        "documented defaults; chunk-2048: 2048-token prefill chunks; search-default: the search's first "
        "max_num_batched_tokens, 8192); with --fit, the one an uncalibrated row is judged by",
    )
    fidelity.add_argument(
        "--compare-protocols",
        action="store_true",
        help="also replay every row by the other protocols and print the errors side by side",
    )
    fidelity.add_argument("--jobs", type=int, default=1, help="rows replayed at a time (default 1)")
    fidelity.add_argument(
        "--fit",
        metavar="FILE",
        help="choose per (system, backend[, model]) a replay protocol and a correction by cross-validation within "
        "half the rows, write them to FILE (a config's `calibration:`) and report the other half's errors with and "
        "without them, per group and per concurrency and ISL band (docs/fidelity/load.md)",
    )
    fidelity.add_argument(
        "--attribution",
        action="store_true",
        help="also print every replayed row's TTFT split into queue wait and admit-to-first-token beside the measured one",
    )
    fidelity.add_argument(
        "--cache",
        metavar="DIR",
        help="keep each row's replay in DIR by its trial and the replay's versions, and read it back from there",
    )
    argv = list(sys.argv[1:] if argv is None else argv)
    # Split off Snakemake's arguments ourselves: argparse's REMAINDER would also swallow our own options
    # given after the config path (`spica run c.yaml --profile p` must not hand --profile to Snakemake).
    cut = argv.index("--") if "--" in argv else len(argv)
    args, extra = parser.parse_args(argv[:cut]), argv[cut + 1 :]
    if extra and args.command != "run":
        parser.error("arguments after `--` are only for `spica run`")
    kind = _input_kind(args.config) if args.command in ("run", "validate") else None
    if args.command == "run" and kind is not InputKind.FLEET:
        from spica_lib.run.launcher import run_sweep

        cores = args.cores if args.cores is not None else (None if args.profile else 2)
        extra = ["--dry-run", *extra] if args.dry_run else extra
        if args.verbose and args.dry_run:
            parser.error("-v shows a running sweep's Snakemake log; a dry run (-n) prints Snakemake's plan already")
        return run_sweep(args.config, cores=cores, profile=args.profile, run=args.run_name, extra=extra,
                         verbose=args.verbose)  # fmt: skip
    if args.command in ("run", "fleet"):  # a fleet config under `spica run` is run as `spica fleet` runs it
        if extra:
            parser.error("arguments after `--` are for one sweep's Snakemake; a fleet runs one sweep per model")
        from spica_lib.fleet.launch import run_fleet

        if args.verbose and args.dry_run:
            parser.error("-v shows a running fleet's Snakemake log; a dry run (-n) prints Snakemake's plan already")
        cores = args.cores if args.cores is not None else 2
        return run_fleet(args.config, cores=cores, profile=args.profile, run=args.run_name,
                         extra=["--dry-run"] if args.dry_run else [], verbose=args.verbose)  # fmt: skip
    if args.command == "evaluate":
        return _evaluate(args.config, args.candidate, args.json, args.per_request)
    if args.command == "schema":
        if args.markdown:
            from spica_lib.config.reference import config_reference

            print(config_reference(), end="")
        else:
            print(json.dumps(SmartSearchConfig.model_json_schema(), indent=2))
        return EXIT_OK
    if args.command == "pools":
        return _pools(args.config)
    if args.command == "fidelity":
        from spica_lib.cli.fidelity import fidelity_command

        if args.from_json and not args.fit and args.jobs != 1:
            parser.error("--jobs sets how many rows replay at a time; with --from-json and no --fit nothing is replayed")

        if args.deployment and not args.rows:
            parser.error("--deployment describes the deployment of an AIPerf export given by --rows")
        if args.rows:
            from spica_lib.cli.fidelity import user_rows_command

            if args.mode != "agg" or args.system or args.backend or args.model:
                parser.error("--rows replays every row of your file: leave out --mode, --system, --backend, --model")
            return user_rows_command(
                args.rows, args.deployment, args.limit, args.json, args.fit, args.ranking, args.from_json,
                args.protocol, args.compare_protocols, args.jobs, cache_dir=args.cache, attribution=args.attribution,
            )  # fmt: skip
        return fidelity_command(
            args.system, args.backend, args.model, args.limit, args.json, args.fit, args.ranking, args.from_json,
            args.protocol, args.compare_protocols, args.jobs, args.mode, cache_dir=args.cache,
            attribution=args.attribution,
        )  # fmt: skip
    if args.command in ("status", "show", "report"):
        from spica_lib.cli.runs import run_command

        if args.command == "show" and args.namespace is not None and not args.manifests:
            parser.error("--namespace sets the namespace of the files --manifests prints; add --manifests")
        namespace = getattr(args, "namespace", None) or DEFAULT_NAMESPACE
        try:
            check_namespace(namespace)
        except ValueError as bad:
            parser.error(f"--namespace: {bad}")
        manifests = getattr(args, "manifests", False)
        slurm = None
        if args.command == "report":
            from spica_lib.deploy.slurm_script import SlurmOptions

            given = {k: getattr(args, f"slurm_{k}") for k in ("account", "partition", "time", "image", "python_env")}
            try:
                slurm = SlurmOptions(**given)
            except ValueError as bad:
                parser.error(f"--slurm-*: {bad}")
        return run_command(args.command, args.run, getattr(args, "which", None), namespace, manifests, slurm)
    if args.command == "rehearse":
        return rehearse_command(args)
    if kind is InputKind.FLEET:
        return _validate_fleet(args.config)
    return _validate(args.config)


def _input_kind(path: str) -> InputKind | None:
    """The document's kind; None when it cannot be read (the door that reads it says why, as before)."""
    try:
        return read_input(path)[0]
    except ConfigError:
        return None


def _validate_fleet(path: str) -> int:
    from spica_lib.fleet.config import load_fleet_config

    try:
        fleet, plans = load_fleet_config(path)
    except ConfigError as error:
        print(error, file=sys.stderr)
        return EXIT_CONFIG
    inventory = ", ".join(f"{n} x {sku}" for sku, n in fleet.inventory.items())
    lines = [f"{path}: valid fleet config — {len(plans)} model(s) on {inventory}, goal {fleet.goal}"]
    for plan in plans:
        lines.append(
            f"  {plan.name:<24} {plan.config.search_space.model_name}: {plan.offered_rps:g} req/s offered, "
            f"headroom {plan.headroom:g}, smallest deployment {plan.smallest_label}"
        )
    print("\n".join(lines))
    return EXIT_OK


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


def _validate(path: str) -> int:
    try:
        validated = build_validated_config(path)
        branches = enumerate_branches(validated.config, apply_policy_filters(validated.config).kept)
    except NoViableParallelConfig as error:
        print(ConfigError(error.problems, source=path), file=sys.stderr)
        return EXIT_CONFIG
    except ConfigError as error:
        print(error, file=sys.stderr)
        return EXIT_CONFIG
    print(summary(path, validated, branches))
    return EXIT_OK


def _evaluate(path: str, candidate: str, as_json: bool, per_request: str | None) -> int:
    from spica_lib.cli.candidate import candidate_selection, read_candidate
    from spica_lib.facts.catalog import resolve_backend_version
    from spica_lib.facts.kv_capacity import KvEstimator
    from spica_lib.trial.evaluate import evaluate_trial, prepare_failure, prepare_trial
    from spica_lib.trial.spec import TrialRecord

    try:
        validated = build_validated_config(path)
        config = validated.config
        selection, parallel = candidate_selection(config, read_candidate(candidate))
    except ConfigError as error:
        print(error, file=sys.stderr)
        return EXIT_CONFIG
    space = config.search_space
    version = resolve_backend_version(space.hardware_sku, selection["backend"])
    if version is None:
        print(f"no perf database for backend {selection['backend']} on {space.hardware_sku}", file=sys.stderr)
        return EXIT_CONFIG
    estimator = KvEstimator(space.model_name, space.hardware_sku, {selection["backend"]: version})
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
