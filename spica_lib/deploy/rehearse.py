"""`spica rehearse RUN`: start a ranked deployment for real, with mocker workers, and hold it against its replay.

Before anyone spends a GPU on `deploy/<rank>/`, the rehearsal starts what those files describe with Dynamo's
own frontend, router and workers (deploy/live_plan.py: the DGD's frontend command, the replay's engine
arguments in each mocker), waits until every worker has registered, sends a bounded sample of the trial's
traffic (deploy/rehearsal_traffic.py) and replays the same sample offline. `deploy/<rank>/rehearsal.json`
(`Rehearsal`) and `rehearsal.md` hold both side by side, and the logs of every process are kept in
`deploy/<rank>/rehearsal/`. A deployment that does not start, register, route or serve is a clear failure
naming the process and its log (deploy/live_processes.py), recorded in `rehearsal.json` → `error`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import yaml

from spica_lib.base.artifacts import atomic_write_text, write_model
from spica_lib.base.versions import package_versions
from spica_lib.deploy.live_client import send_traffic
from spica_lib.deploy.live_plan import frontend_process, mocker_processes, role_workers
from spica_lib.deploy.live_processes import LiveDeployment, RehearsalFailed, free_ports
from spica_lib.deploy.live_results import live_rows, unreached
from spica_lib.deploy.model_folder import vocabulary_size, write_model_folder
from spica_lib.deploy.rehearsal import (
    COMPARED,
    ProcessLog,
    Rehearsal,
    RequestRow,
    differences,
    load_stats,
    replay_rows,
)
from spica_lib.deploy.rehearsal_traffic import DEFAULT_REQUESTS, RehearsalTraffic, rehearsal_traffic, write_trace
from spica_lib.trial.describe import describe
from spica_lib.trial.spec import TrialRecord, TrialSpec

REPLAY_SECONDS = 600.0  # the offline replay of the sample: a few hundred requests take seconds


def rehearse(
    deploy_dir: str | Path,
    rank: int = 1,
    where: Literal["local", "slurm"] = "local",
    requests: int = DEFAULT_REQUESTS,
    speedup: float = 1.0,
    partition: str | None = None,
) -> Rehearsal:
    """Rehearse `deploy/<rank>/` (see the module docstring); raises RehearsalFailed after writing the record."""
    folder = Path(deploy_dir) / str(rank)
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
    trace = write_trace(traffic, work / "traffic.jsonl")
    found = Rehearsal(rank=rank, key=record.key, deployment=describe(record.spec), where=where, speedup=speedup,
                      traffic=traffic.source, notes=_notes(record), versions=package_versions())  # fmt: skip
    try:
        if where == "slurm":
            from spica_lib.deploy.rehearse_slurm import run_on_slurm

            rows, found = run_on_slurm(folder, record, dgd, traffic, speedup, found, partition)
        else:
            rows, found = _run_locally(work, record, dgd, traffic, speedup, found)
        found.live = load_stats(rows, record.spec.goal.sla)
        found.replay = load_stats(_replayed(record.spec, trace, traffic, work), record.spec.goal.sla)
        found.differences = differences(found.live, found.replay)
        found.notes += refusals(found)
    except RehearsalFailed as failed:
        found.error = str(failed)
        raise
    finally:
        write_model(folder / "rehearsal.json", found)
        atomic_write_text(folder / "rehearsal.md", rehearsal_markdown(found))
    return found


def _run_locally(
    work: Path, record: TrialRecord, dgd: dict, traffic: RehearsalTraffic, speedup: float, found: Rehearsal
) -> tuple[list[RequestRow], Rehearsal]:
    plan = record.spec.replay.plan
    prefill_workers = role_workers(plan).get("prefill", ({}, 0))[1]
    port, *bootstrap = free_ports(1 + prefill_workers)
    with LiveDeployment(work, port) as live:
        model = str(write_model_folder(record.spec.sample["model_name"], live.model_dir))
        processes = [frontend_process(dgd, port), *mocker_processes(plan, model, speedup, bootstrap)]
        found.processes = [ProcessLog(name=p.name, argv=p.argv, log=str(live.log(p.name))) for p in processes]
        live.start(processes)
        found.ready_seconds = live.wait_until_serving(model)
        sent = send_traffic(live.url, model, traffic, vocabulary_size(live.model_dir), speedup)
        components = live.worker_components()
    found.live_seconds = max((r.last_token or r.sent for r in sent), default=0.0)
    rows = live_rows(sent, components, role_workers(plan), speedup)
    unreached(rows, role_workers(plan), work / "frontend.log")
    return rows, found


def _replayed(spec: TrialSpec, trace: Path, traffic: RehearsalTraffic, work: Path) -> list[RequestRow]:
    """The same sample replayed offline, as the sweep replays: one Dynamo replay in a worker process."""
    import pandas as pd

    from spica_lib.config.trace import scan_trace
    from spica_lib.trial.evaluate import evaluate_trial

    workload = spec.replay.workload.model_copy(update={
        "trace_path": str(trace), "isl": None, "osl": None, "request_rate": None, "num_request_ratio": None,
        "concurrency": None, "kv_load_ratio": None, "arrival_seed": None, "holdout": None,
        "arrival_speedup_ratio": 1.0, "replay_concurrency": traffic.in_flight_cap,
        "shared_prefix_ratio": 0.0, "num_prefix_groups": 0,
    })  # fmt: skip
    replay = spec.replay.model_copy(update={"workload": workload, "screen": None, "concurrency": None})
    sample = spec.model_copy(update={"replay": replay, "workloads": None, "trace_sha256": scan_trace(trace).sha256})
    per_request = work / "replay_per_request.parquet"
    result = evaluate_trial(sample, max_eval_seconds=REPLAY_SECONDS, per_request_path=str(per_request))
    if not per_request.is_file():
        raise RehearsalFailed(f"the offline replay of the rehearsal's traffic failed: {result.status}: {result.reason}")
    return replay_rows(pd.read_parquet(per_request), role_workers(spec.replay.plan))


HANDOFF_LIMIT = "handoff session limit"  # Dynamo 1.5.1's live mocker, refusing a prefill beyond its session slots


def refusals(found: Rehearsal) -> list[str]:
    """What the live system refused that the replay served: said first, never averaged away."""
    failed = found.live.requests - found.live.completed
    if not failed:
        return []
    errors = found.live.errors
    why = (
        " Dynamo 1.5.1's live mocker refuses a prefill handoff once a prefill worker holds as many sessions as "
        "its max_num_seqs, where the offline replay queues the request: a burst above that is refused live."
        if any(HANDOFF_LIMIT in e for e in errors)
        else ""
    )
    return [f"{failed} of {found.live.requests} requests failed live (first: {errors[0] if errors else 'no reply'}); "
            f"the replay completed {found.replay.completed}.{why}"]  # fmt: skip


def _notes(record: TrialRecord) -> list[str]:
    notes = []
    plan = record.spec.replay.plan
    if plan.planner_config:
        notes.append("the planner is not rehearsed: the workers run at the replay's starting counts, live and replayed")
    if record.spec.workloads:
        notes.append("several workloads were replayed; the rehearsal sends the first")
    return notes


def rehearsal_markdown(found: Rehearsal) -> str:
    """The report's section: live and replay side by side."""
    lines = [f"## Rehearsal of rank {found.rank}: {found.deployment}", "",
             f"Started {found.where} with Dynamo's frontend, router and mocker workers (speed-up {found.speedup:g}); "
             f"traffic: {found.traffic}, sent live and replayed offline.", ""]  # fmt: skip
    if found.error:
        return "\n".join([*lines, f"**Failed**: {found.error}", ""])
    if found.live.completed < found.live.requests:
        lines += [f"**{found.notes[-1]}**", ""]
    if found.ready_seconds is not None:
        lines += [f"Every worker registered {found.ready_seconds:.1f} s after the first start.", ""]
    lines += ["| metric | replay | live | difference |", "|---|---:|---:|---:|"]
    for name in COMPARED:
        live, replay = getattr(found.live, name), getattr(found.replay, name)
        diff = found.differences.get(name)
        lines.append(f"| {name} | {_num(replay)} | {_num(live)} | {'—' if diff is None else f'{100 * diff:+.1f} %'} |")
    for side in ("replay", "live"):
        stats = getattr(found, side)
        per = "; ".join(f"{role}: {counts}" for role, counts in stats.requests_per_worker.items())
        lines.append(f"\n{side}: {stats.completed} of {stats.requests} requests completed; requests per worker: {per}")
    lines += [f"\n- {note}" for note in found.notes]
    return "\n".join(lines) + "\n"


def _num(value: float | None) -> str:
    return "—" if value is None else f"{value:.4g}"
