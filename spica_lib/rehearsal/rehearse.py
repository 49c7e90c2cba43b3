"""`spica rehearse RUN`: start a ranked deployment for real, with mocker workers, and hold it against its replay.

Before anyone spends a GPU on `deploy/<rank>/`, the rehearsal starts what those files describe with Dynamo's
own frontend, router and workers (deploy/live_plan.py: the DGD's frontend command, the replay's engine
arguments in each mocker), waits until every worker has registered, sends a bounded sample of the trial's
traffic (rehearsal/traffic.py) and replays the same sample offline. `deploy/<rank>/rehearsal.json`
(`Rehearsal`) and `rehearsal.md` hold both side by side, and the logs of every process are kept in
`deploy/<rank>/rehearsal/`. A deployment that does not start, register, route or serve is a clear failure
naming the process and its log (rehearsal/processes.py), recorded in `rehearsal.json` → `error`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import yaml

from spica_lib.base.artifacts import atomic_write_text, write_model
from spica_lib.base.versions import package_versions
from spica_lib.rehearsal.client import send_traffic, warm_up
from spica_lib.deploy.live_plan import rehearsal_steps, role_workers
from spica_lib.replay.plan import DeploymentPlan
from spica_lib.rehearsal.processes import LiveDeployment, RehearsalFailed, free_ports
from spica_lib.rehearsal.results import run_rows
from spica_lib.rehearsal.model_folder import vocabulary_size, write_model_folder
from spica_lib.rehearsal.record import (
    COMPARED,
    TOLERANCES,
    ProcessLog,
    Rehearsal,
    RequestRow,
    differences,
    in_flight,
    judge,
    load_stats,
    replay_rows,
)
from spica_lib.run.layout import deployment_folder
from spica_lib.rehearsal.traffic import (
    DEFAULT_REQUESTS,
    RehearsalTraffic,
    closed_loop,
    rehearsal_traffic,
    write_trace,
)
from spica_lib.trial.describe import describe
from spica_lib.trial.spec import TrialRecord, TrialSpec

REPLAY_SECONDS = 600.0
CLOSED_TURNS = 4  # the closed loop turns over at least this many times


def rehearse(
    deploy_dir: str | Path,
    rank: int = 1,
    where: Literal["local", "slurm"] = "local",
    requests: int = DEFAULT_REQUESTS,
    speedup: float = 1.0,
    partition: str | None = None,
) -> Rehearsal:
    """Rehearse `deploy/<rank>/` (see the module docstring); raises RehearsalFailed after writing the record."""
    folder = Path(deployment_folder(deploy_dir, rank))
    if not (folder / "trial.json").is_file():
        raise RehearsalFailed(f"no deployment files at {folder} (the run ranks fewer, or its deploy stage has not run)")
    record = TrialRecord.model_validate_json((folder / "trial.json").read_text(encoding="utf-8"))
    dgd_path = folder / "k8s_deploy.yaml"
    if not dgd_path.is_file():
        raise RehearsalFailed(f"{folder} has no {dgd_path.name}: deploy.json → error says why it was not written")
    dgd = next(yaml.safe_load_all(dgd_path.read_text(encoding="utf-8")))
    traffic = rehearsal_traffic(record.spec.replay, requests)
    work = folder / "rehearsal"
    work.mkdir(parents=True, exist_ok=True)
    found = Rehearsal(rank=rank, key=record.key, deployment=describe(record.spec), where=where, speedup=speedup,
                      traffic=traffic.source, notes=_notes(record), versions=package_versions())  # fmt: skip
    sla = record.spec.goal.sla
    try:
        # Offline first: the open loop's replay sets the closed loop's in-flight cap (Little's law).
        replayed = _replayed(record.spec, write_trace(traffic, work / "traffic.jsonl"), traffic, work, "open")
        found.closed_in_flight = closed_in_flight(replayed, len(traffic.requests), record.spec.replay.plan)
        closed = closed_loop(traffic, found.closed_in_flight)
        closed_replayed = _replayed(record.spec, write_trace(closed, work / "closed.jsonl"), closed, work, "closed")
        if where == "slurm":
            from spica_lib.rehearsal.on_slurm import run_on_slurm

            (rows, closed_rows), found = run_on_slurm(folder, record, dgd, (traffic, closed), speedup, found,
                                                      _gpus_per_node(folder), partition)  # fmt: skip
        else:
            (rows, closed_rows), found = _run_locally(work, record, dgd, (traffic, closed), speedup, found)
        found.live, found.replay = load_stats(rows, sla), load_stats(replayed, sla)
        found.closed_live, found.closed_replay = load_stats(closed_rows, sla), load_stats(closed_replayed, sla)
        found.differences = differences(found.live, found.replay)
        found.verdict, found.verdict_reasons = judge(found)
        found.notes += refusals(found)
    except RehearsalFailed as failed:
        found.error = str(failed)
        raise
    finally:
        write_model(folder / "rehearsal.json", found)
        atomic_write_text(folder / "rehearsal.md", rehearsal_markdown(found))
    return found


def _run_locally(
    work: Path, record: TrialRecord, dgd: dict, runs: tuple[RehearsalTraffic, ...], speedup: float, found: Rehearsal
) -> tuple[list[list[RequestRow]], Rehearsal]:
    """The same steps as the sbatch script's, as processes on this machine; each traffic run sent in turn."""
    plan = record.spec.replay.plan
    model = record.spec.sample["model_name"]
    steps = rehearsal_steps(plan, dgd, str(record.spec.sample.get("backend")), model, speedup)
    (port,) = free_ports(1)
    with LiveDeployment(work, port) as live:
        write_model_folder(model, live.model_dir)
        found.processes = [ProcessLog(name=p.name, argv=p.argv, log=str(live.log(p.name))) for p in steps]
        live.start(steps)
        found.ready_seconds = live.wait_until_serving(model)
        warm_up(live.url, model, runs[0], vocabulary_size(live.model_dir))
        sent = [send_traffic(live.url, model, traffic, vocabulary_size(live.model_dir), speedup) for traffic in runs]
        components = live.worker_components()
    return run_rows(sent, components, plan, speedup, work / "frontend.log", found), found


def _replayed(spec: TrialSpec, trace: Path, traffic: RehearsalTraffic, work: Path, name: str) -> list[RequestRow]:
    """The same sample replayed offline, as the sweep replays (one Dynamo replay in a worker process), with the
    workers the live side runs: the planner's starting counts, held (the live mockers have no planner)."""
    import pandas as pd

    from spica_lib.traces.scan import scan_trace
    from spica_lib.trial.evaluate import evaluate_trial

    workload = spec.replay.workload.model_copy(update={
        "trace_path": str(trace), "isl": None, "osl": None, "request_rate": None, "num_request_ratio": None,
        "concurrency": None, "kv_load_ratio": None, "arrival_seed": None, "holdout": None,
        "arrival_speedup_ratio": 1.0, "replay_concurrency": traffic.in_flight_cap,
        "shared_prefix_ratio": 0.0, "num_prefix_groups": 0,
    })  # fmt: skip
    plan = spec.replay.plan.model_copy(update={"planner_config": None})
    replay = spec.replay.model_copy(update={"workload": workload, "screen": None, "concurrency": None, "plan": plan})
    sample = spec.model_copy(update={"replay": replay, "workloads": None, "trace_sha256": scan_trace(trace).sha256})
    per_request = work / f"replay_{name}_per_request.parquet"
    result = evaluate_trial(sample, max_eval_seconds=REPLAY_SECONDS, per_request_path=str(per_request))
    if not per_request.is_file():
        raise RehearsalFailed(f"the offline replay of the rehearsal's traffic failed: {result.status}: {result.reason}")
    return replay_rows(pd.read_parquet(per_request), role_workers(spec.replay.plan))


def closed_in_flight(replayed: list[RequestRow], requests: int, plan: DeploymentPlan) -> int:
    """The closed loop's cap: the concurrency the replay of the open loop carried on average (Little's law), at most
    a CLOSED_TURNS-th of the requests (over fewer turns a closed loop's tok/s is its ramp's, not the deployment's),
    and at most the prefill workers' session slots (Dynamo 1.5.1's live mocker refuses a prefill handoff past its
    max_num_seqs, where the replay and a real engine queue it: past them, live would measure the mocker's refusal)."""
    cap = min(in_flight(replayed), requests // CLOSED_TURNS)
    args, workers = role_workers(plan).get("prefill", ({}, 0))
    if workers and args.get("max_num_seqs"):
        cap = min(cap, workers * int(args["max_num_seqs"]))
    return max(1, cap)


def _gpus_per_node(folder: Path) -> int:
    """The node the deployment's files were written for (deploy.json), which its script, and so its rehearsal,
    asks for."""
    from spica_lib.base.artifacts import read_model
    from spica_lib.deploy.top import DeploymentFiles

    written = read_model(folder / "deploy.json", DeploymentFiles).gpus_per_node if (folder / "deploy.json").is_file() else None
    if written is None:
        raise RehearsalFailed(f"{folder / 'deploy.json'} does not say the node its files were written for: write them "
                              "again (spica report RUN)")  # fmt: skip
    return written


HANDOFF_LIMIT = "handoff session limit"  # Dynamo 1.5.1's live mocker, refusing a prefill beyond its session slots


def refusals(found: Rehearsal) -> list[str]:
    """What the live system refused that the replay served, in either run: said first, never averaged away."""
    out = []
    for label, live, replay in (("", found.live, found.replay), (" in the closed loop", found.closed_live,
                                                                   found.closed_replay)):  # fmt: skip
        failed = live.requests - live.completed if live is not None else 0
        if not failed:
            continue
        errors = live.errors
        why = (
            " Dynamo 1.5.1's live mocker refuses a prefill handoff once a prefill worker holds as many sessions as "
            "its max_num_seqs, where the offline replay queues the request: a burst above that is refused live."
            if any(HANDOFF_LIMIT in e for e in errors)
            else ""
        )
        out.append(f"{failed} of {live.requests} requests failed live{label} (first: "
                   f"{errors[0] if errors else 'no reply'}); the replay completed {replay.completed}.{why}")  # fmt: skip
    return out


def _notes(record: TrialRecord) -> list[str]:
    notes = []
    plan = record.spec.replay.plan
    if plan.planner_config:
        notes.append("the planner is not rehearsed: the workers run at the replay's starting counts, live and replayed")
    if record.spec.workloads:
        notes.append("several workloads were replayed; the rehearsal sends the first")
    return notes


def rehearsal_markdown(found: Rehearsal) -> str:
    """The report's section: the verdict first, then live and replay side by side, each with its tolerance."""
    lines = [f"## Rehearsal of rank {found.rank}: {found.deployment}", "",
             f"Started {found.where} with Dynamo's frontend, router and mocker workers (speed-up {found.speedup:g}); "
             f"traffic: {found.traffic}, sent live and replayed offline, then the same requests in a closed loop of "
             f"{found.closed_in_flight} in flight (the concurrency the replay carried on average, at most a "
             f"{CLOSED_TURNS}th of the requests, and at most the prefill workers' session slots), on prompts of their "
             "own (no prefix the open loop cached).", ""]  # fmt: skip
    if found.error:
        return "\n".join([*lines, f"**Failed**: {found.error}", ""])
    if found.live.completed < found.live.requests:
        lines += [f"**{found.notes[-1]}**", ""]
    reasons = "; ".join(found.verdict_reasons)
    lines += [f"**Verdict: {found.verdict}**" + (f": {reasons}." if reasons else "."), ""]
    if found.ready_seconds is not None:
        start = "the job started" if found.where == "slurm" else "the first process started"
        lines += [f"Every worker registered {found.ready_seconds:.1f} s after {start}.", ""]
    lines += ["| metric | replay | live | difference | tolerance |", "|---|---:|---:|---:|---:|"]
    closed = differences(found.closed_live, found.closed_replay) if found.closed_live and found.closed_replay else {}
    rows = [(name, found.replay, found.live, found.differences.get(name), name) for name in COMPARED]
    rows.append(("closed-loop output_tok_s", found.closed_replay, found.closed_live, closed.get("output_tok_s"),
                 "closed_output_tok_s"))  # fmt: skip
    for label, replay, live, diff, key in rows:
        metric = "output_tok_s" if key == "closed_output_tok_s" else key
        unit = " points" if key == "sla_share" else " %"
        tolerance = f"±{100 * TOLERANCES[key]:g}{unit}" if key in TOLERANCES else "—"
        shown = "—" if diff is None else f"{100 * diff:+.1f}{unit}"
        lines.append(f"| {label} | {_num(getattr(replay, metric, None))} | {_num(getattr(live, metric, None))} | "
                     f"{shown} | {tolerance} |")  # fmt: skip
    for side in ("replay", "live"):
        stats = getattr(found, side)
        per = "; ".join(f"{role}: {counts}" for role, counts in stats.requests_per_worker.items())
        lines.append(f"\n{side}: {stats.completed} of {stats.requests} requests completed; requests per worker: {per}")
    for label, load in zip(("open loop", "closed loop"), found.machine, strict=False):
        lines.append(f"\nThe machine during the {label}: {load.words()}"
                     + ("" if load.kept_up else " (too loaded: latency is not judged)"))  # fmt: skip
    lines += [f"\n- {note}" for note in found.notes]
    return "\n".join(lines) + "\n"


def _num(value: float | None) -> str:
    return "—" if value is None else f"{value:.4g}"
