"""A trial: one candidate, fully specified, replayed and scored — and stored as one file.

`prepare_trial` turns a selection and a parallel layout into a `TrialSpec`: the flat sample, the
deployment plan and the replay request, everything needed to reproduce the replay. Its canonical
JSON hash (`TrialSpec.key`) names the trial file, so an identical candidate is never replayed twice.
`evaluate_trial` gates the GPU budget, runs the replay in a child process it kills at the time
limit, and scores the report. Every outcome — feasible, infeasible, failed, timed out,
unsupported — is a `TrialResult` with its reason; nothing is raised for a bad candidate.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from spica_lib.artifacts import read_model, sha256_of, write_model
from spica_lib.config import OptimizationGoal, OptimizationTarget, SmartSearchConfig
from spica_lib.deployment import build_deployment
from spica_lib.kv_capacity import KvEstimator
from spica_lib.kv_load import InfeasibleKVCapacity, resolve_kv_load
from spica_lib.parallel import DisaggConfig, ParallelConfig, ReplicaConfig
from spica_lib.presets import CompositeEntry
from spica_lib.replay import ReplayOutcome, ReplayRequest, ScalingEvent, replay_call
from spica_lib.sample import unroll_sample
from spica_lib.score import average_gpus, make_candidate
from spica_lib.trace import file_sha256
from spica_lib.versions import package_versions

SCHEMA_VERSION = 1
TrialStatus = Literal["feasible", "infeasible", "failed", "timed_out", "unsupported"]
GOODPUT_KEY = "goodput_output_throughput_tok_s"
STDERR_TAIL = 2000


class TrialSpec(BaseModel):
    """Everything needed to reproduce one replay. Its hash (`key`) is the trial's identity."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_version: int = SCHEMA_VERSION
    deployment_mode: Literal["agg", "disagg"]
    selection: dict[str, Any]
    parallel_config: ReplicaConfig | DisaggConfig
    sample: dict[str, Any]
    replay: ReplayRequest
    goal: OptimizationGoal
    gpu_budget: int
    trace_sha256: str | None = None
    notes: list[str] = Field(default_factory=list)

    @property
    def used_gpus(self) -> int:
        return self.parallel_config.total_gpus

    def key(self) -> str:
        """SHA-256 of the canonical JSON, with the trace named by its content rather than its path."""
        data = self.model_dump(mode="json")
        if self.trace_sha256 is not None:
            data["replay"]["workload"]["trace_path"] = f"sha256:{self.trace_sha256}"
        return sha256_of(data)


class TrialResult(BaseModel):
    """How a trial ended, with its metrics and score when it was feasible."""

    model_config = ConfigDict(extra="forbid")

    status: TrialStatus
    reason: str | None = None
    metrics: dict[str, float] = Field(default_factory=dict)
    objectives: dict[str, float] | None = None
    score: float | None = None
    used_gpus: int
    average_gpus: float | None = None
    scaling_events: list[ScalingEvent] = Field(default_factory=list)
    wall_seconds: float = 0.0
    cpu_seconds: float = 0.0
    replay_seconds: float = 0.0
    versions: dict[str, str] = Field(default_factory=dict)


class TrialRecord(BaseModel):
    """Artifact `rounds/<branch>/<k>/trials/<key>.json`: a trial's spec and its result."""

    model_config = ConfigDict(extra="forbid")

    key: str
    spec: TrialSpec
    result: TrialResult


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
    workload, goal = config.workload, config.goal
    sample = unroll_sample(config.search_space, selection, parallel_config, predictor_winners)
    sample["backend_version"] = backend_version
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
    plan = build_deployment(
        sample,
        backend_version=backend_version,
        optimization_target=goal.target.planner_optimization_target,
        sla_ttft_ms=sla.ttft_ms if sla else None,
        sla_itl_ms=sla.itl_ms if sla else None,
    )
    notes = []
    if plan.router_mode == "kv_router" and plan.deployment_mode == "agg" and plan.routing_targets < 2:
        # The replay refuses a KV router with a single target; with one target it routes like round robin.
        plan = plan.model_copy(update={"router_mode": "round_robin", "router_config": None})
        notes.append("kv_router with a single worker/DP rank replayed as round_robin (nothing to choose between)")
    trace = workload.trace_path
    return TrialSpec(
        deployment_mode=selection["deployment_mode"],
        selection=selection,
        parallel_config=parallel_config,
        sample=sample,
        replay=ReplayRequest(plan=plan, workload=workload, concurrency=concurrency, sla=sla),
        goal=goal,
        gpu_budget=config.search_space.gpu_budget,
        trace_sha256=file_sha256(trace) if trace else None,
        notes=notes,
    )


def rejected_before_replay(status: TrialStatus, reason: str, used_gpus: int) -> TrialResult:
    """A trial that never reached the replay (unsupported pair, KV infeasible, build error)."""
    return TrialResult(status=status, reason=reason, used_gpus=used_gpus, versions=package_versions())


def prepare_failure(exc: Exception, used_gpus: int) -> TrialResult:
    if isinstance(exc, InfeasibleKVCapacity):
        return rejected_before_replay("infeasible", f"candidate KV capacity infeasible: {exc}", used_gpus)
    return rejected_before_replay("failed", f"candidate build failed: {type(exc).__name__}: {exc}", used_gpus)


def evaluate_trial(
    spec: TrialSpec, *, max_eval_seconds: float | None = None, per_request_path: str | None = None
) -> TrialResult:
    """Replay and score one trial. Never raises for a bad candidate: the result says what happened."""
    used = spec.used_gpus
    if used > spec.gpu_budget:
        return rejected_before_replay(
            "infeasible", f"over gpu_budget: used_gpus={used} > gpu_budget={spec.gpu_budget}", used
        )
    run = run_in_child(spec.replay, max_eval_seconds, per_request_path)
    base = {
        "used_gpus": used,
        "wall_seconds": run.wall_seconds,
        "cpu_seconds": run.cpu_seconds,
        "versions": package_versions(),
    }
    if run.status != "ok":
        return TrialResult(status=run.status, reason=run.reason, **base)
    outcome = run.report.outcome
    metrics = outcome.metrics
    timing = {"replay_seconds": outcome.replay_seconds, "scaling_events": outcome.scaling_events}
    needs_goodput = [t for t in spec.goal.objectives if t.needs_sla]
    if needs_goodput and GOODPUT_KEY not in metrics:
        reason = f"replay reported no {GOODPUT_KEY} for a goodput objective (no per-request SLA accounting)"
        return TrialResult(status="failed", reason=reason, metrics=metrics, **base, **timing)
    target = spec.goal.target
    objectives = spec.goal.resolved_pareto_objectives if target is OptimizationTarget.PARETO else None
    candidate = make_candidate(spec.sample, metrics, target, objectives)
    return TrialResult(
        status="feasible",
        metrics=candidate.metrics,
        objectives=candidate.objectives,
        score=candidate.score,
        average_gpus=average_gpus(metrics),
        **base,
        **timing,
    )


class ChildReport(BaseModel):
    """What `spica_lib.replay_child` writes."""

    model_config = ConfigDict(extra="forbid")

    ok: bool
    outcome: ReplayOutcome | None = None
    error: str | None = None
    cpu_seconds: float


class ChildRun(BaseModel):
    model_config = ConfigDict(extra="forbid")

    status: Literal["ok", "failed", "timed_out"]
    reason: str | None = None
    report: ChildReport | None = None
    wall_seconds: float
    cpu_seconds: float


def run_in_child(request: ReplayRequest, timeout: float | None, per_request_path: str | None = None) -> ChildRun:
    """Run the replay in a fresh process (its own session, so a kill takes everything it started)."""
    with tempfile.TemporaryDirectory(prefix="spica-trial-") as folder:
        request_file, result_file, stderr_file = (Path(folder) / n for n in ("call.json", "result.json", "stderr.txt"))
        request_file.write_text(json.dumps(replay_call(request)), encoding="utf-8")
        command = [sys.executable, "-m", "spica_lib.replay_child", str(request_file), str(result_file)]
        if per_request_path:
            command.append(str(Path(per_request_path).resolve()))
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        with open(stderr_file, "wb") as stderr:
            child = subprocess.Popen(
                command,
                stdout=subprocess.DEVNULL,
                stderr=stderr,
                cwd=folder,  # anything the replay writes beside itself is removed with the folder
                env={**os.environ, "DYN_LOG": os.environ.get("DYN_LOG", "error")},
                start_new_session=True,
            )
            timed_out = _wait(child, timeout)
        wall = time.perf_counter() - started
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        if timed_out:
            reason = f"replay exceeded max_eval_seconds={timeout:g} and was stopped"
            return ChildRun(status="timed_out", reason=reason, wall_seconds=wall, cpu_seconds=cpu)
        if not result_file.is_file():
            tail = stderr_file.read_text(encoding="utf-8", errors="replace")[-STDERR_TAIL:].strip()
            reason = f"replay process died (exit code {child.returncode}): {tail}"
            return ChildRun(status="failed", reason=reason, wall_seconds=wall, cpu_seconds=cpu)
        report = ChildReport.model_validate_json(result_file.read_text(encoding="utf-8"))
        if not report.ok:
            return ChildRun(
                status="failed",
                reason=f"replay failed: {report.error}",
                report=report,
                wall_seconds=wall,
                cpu_seconds=cpu,
            )
        return ChildRun(status="ok", report=report, wall_seconds=wall, cpu_seconds=cpu)


def _wait(child: subprocess.Popen, timeout: float | None) -> bool:
    """Wait for the child; at the time limit kill its whole process group. True if it was killed."""
    try:
        child.wait(timeout=timeout)
        return False
    except subprocess.TimeoutExpired:
        try:
            os.killpg(child.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        child.wait()
        return True


def killed_outside(spec: TrialSpec, attempt: int) -> TrialResult:
    """The result of a trial whose every earlier job died without writing it.

    Replay errors and our own timeout are always written as results, so a job that leaves no file was
    killed from outside (a scheduler time limit, a node failure, scancel, the OOM killer). The last
    attempt records that instead of replaying, so the round can be told and the sweep goes on.
    """
    reason = (
        f"killed outside the replay in {attempt - 1} attempt(s) (scheduler time limit, node failure, "
        "cancellation or out of memory); see the trial's job logs"
    )
    return TrialResult(status="failed", reason=reason, used_gpus=spec.used_gpus, versions=package_versions())


def run_trial_job(
    spec: TrialSpec,
    key: str,
    journal: str | Path,
    attempt: int,
    last_attempt: int,
    *,
    max_eval_seconds: float | None = None,
) -> tuple[TrialRecord, bool]:
    """What a trial job writes, and whether it came from the journal rather than a replay now.

    Every finished trial is journaled before its output is written. Snakemake deletes the output of a
    job it sees fail — also when a cancel or time limit hits between the write and the job's exit —
    so a retried or resumed job restores the journaled record instead of replaying it again.
    On a retry that is the last allowed attempt, with nothing journaled, the earlier jobs were
    killed from outside; that is recorded (see `killed_outside`) so the round can be told.
    """
    journal = Path(journal)
    if journal.exists():
        record = read_trial(journal)
        if record.key == key and record.spec == spec:
            return record, True
    if 1 < attempt >= last_attempt:
        result = killed_outside(spec, attempt)
    else:
        result = evaluate_trial(spec, max_eval_seconds=max_eval_seconds)
    record = TrialRecord(key=key, spec=spec, result=result)
    write_model(journal, record)
    return record, False


def trial_path(folder: str | Path, key: str) -> Path:
    return Path(folder) / f"{key}.json"


def write_trial(folder: str | Path, spec: TrialSpec, result: TrialResult) -> Path:
    key = spec.key()
    path = trial_path(folder, key)
    write_model(path, TrialRecord(key=key, spec=spec, result=result))
    return path


def read_trial(path: str | Path) -> TrialRecord:
    return read_model(path, TrialRecord)


def load_records(run_dir: str | Path, keys: list[str]) -> dict[str, TrialRecord]:
    """The stored trials for `keys` (each must exist), wherever their round put them in `run_dir`."""
    found = {path.stem: path for path in sorted(Path(run_dir).glob("rounds/*/*/trials/*.json"))}
    missing = [key for key in keys if key not in found]
    if missing:
        raise FileNotFoundError(f"no trial file under {run_dir}/rounds for key(s) {', '.join(missing)}")
    return {key: read_trial(found[key]) for key in dict.fromkeys(keys)}


def write_spec_once(path: str | Path, spec: TrialSpec) -> None:
    """Write a spec file unless it exists: its name is its content hash, so a rewrite would only
    touch its time stamp — and make the workflow replay a finished trial again."""
    if not Path(path).exists():
        write_model(path, spec)
