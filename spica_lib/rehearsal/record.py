"""Artifact `deploy/<rank>/rehearsal.json`: a deployment started for real (mocker workers) against its replay.

The same traffic sample (rehearsal/traffic.py) is sent to the live frontend and replayed offline, and
the two are summarised by one function from per-request rows (`load_stats`), so every difference is the live
system's: its frontend, router and network, which the replay does not simulate. Live times are scaled back by
the speed-up the rehearsal ran at (the mocker's steps ran that much faster, the arrivals came that much
sooner; the frontend's and the router's own costs did not shrink, so a speed-up inflates their share).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from spica_lib.config.goal import SLATarget

SCHEMA_VERSION = 2  # 2: a closed-loop step, the machine's load, a verdict with its tolerances
# The metrics compared, in the order a table shows them.
COMPARED = ("ttft_mean_ms", "ttft_p90_ms", "itl_mean_ms", "itl_p90_ms", "output_tok_s", "goodput_tok_s", "sla_share")
# How far live may be from the replay before the rehearsal says the deployment differs: (live - replay) / replay,
# but the SLA share, an absolute difference. Latency carries what the replay has no model of (the frontend's
# tokeniser and detokeniser, its server-sent events, the request plane), 1-3 ms a token and tens of ms a request
# on an idle 2-core machine (docs/benchmarks/rehearsal.md), hence the wider latency bounds; throughput is the
# replay's own claim. Closed-loop tok/s is set by the deployment (open-loop tok/s by the arrival rate).
TOLERANCES = {"output_tok_s": 0.10, "closed_output_tok_s": 0.10, "ttft_mean_ms": 0.25, "itl_mean_ms": 0.25,
              "ttft_p90_ms": 0.35, "itl_p90_ms": 0.35, "sla_share": 0.05}  # fmt: skip
LATENCY = ("ttft_mean_ms", "itl_mean_ms", "ttft_p90_ms", "itl_p90_ms", "sla_share")
# The machine kept up when its CPUs were not saturated and the client's event loop woke on time: past either,
# live latency measures the machine, not the deployment.
BUSY_LIMIT = 0.85
LAG_LIMIT_MS = 20.0  # the client's event loop, 90th percentile of its lateness


class RequestRow(BaseModel):
    """One request's outcome, live or replayed, in the replay's time (ms)."""

    model_config = ConfigDict(extra="forbid")

    start_ms: float
    end_ms: float | None = None
    ttft_ms: float | None = None
    itl_ms: float | None = None
    output_tokens: int = 0
    workers: dict[str, str] = Field(default_factory=dict)  # role -> the worker that served it
    error: str | None = None


class LoadStats(BaseModel):
    """A run of the traffic, summarised the same way live and replayed."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    requests: int
    completed: int
    ttft_mean_ms: float | None = None
    ttft_p90_ms: float | None = None
    itl_mean_ms: float | None = None
    itl_p90_ms: float | None = None
    output_tok_s: float | None = None
    goodput_tok_s: float | None = None
    sla_share: float | None = None  # requests that met every SLA bound, of those sent
    requests_per_worker: dict[str, list[int]] = Field(default_factory=dict)  # role -> counts, largest first
    errors: list[str] = Field(default_factory=list)  # the first few failed requests' errors


class MachineLoad(BaseModel):
    """Whether the machine kept up with a traffic run: its CPUs and the client's event loop."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    cores: int
    busy_share: float  # of all CPUs, every process, during the run
    loop_lag_p90_ms: float
    loop_lag_max_ms: float

    @property
    def kept_up(self) -> bool:
        return self.busy_share <= BUSY_LIMIT and self.loop_lag_p90_ms <= LAG_LIMIT_MS

    def words(self) -> str:
        return (f"{100 * self.busy_share:.0f} % of {self.cores} CPUs busy, the client's loop late by "
                f"{self.loop_lag_p90_ms:.1f} ms at p90 ({self.loop_lag_max_ms:.0f} ms at most)")  # fmt: skip


class ProcessLog(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    argv: list[str]
    log: str


class Rehearsal(BaseModel):
    """What a rehearsal started, sent and measured, against the replay of the same traffic."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    schema_version: int = SCHEMA_VERSION
    rank: int
    key: str
    deployment: str
    where: Literal["local", "slurm"]
    speedup: float
    traffic: str  # what the sample is
    processes: list[ProcessLog] = Field(default_factory=list)
    ready_seconds: float | None = None  # from the first start to every worker registered (wall)
    live_seconds: float | None = None  # the traffic's wall time
    live: LoadStats | None = None
    replay: LoadStats | None = None
    differences: dict[str, float] = Field(default_factory=dict)  # metric -> (live - replay) / replay (SLA: absolute)
    # The same requests at once under an in-flight cap: the concurrency the replay of the open loop carried on average
    # (Little's law), so the tok/s compared is the deployment's own, not the arrival rate's.
    closed_in_flight: int | None = None
    closed_live: LoadStats | None = None
    closed_replay: LoadStats | None = None
    machine: list[MachineLoad] = Field(default_factory=list)  # each live traffic run (open, closed)
    verdict: Literal["agrees", "differs", "too loaded to judge latency"] | None = None
    verdict_reasons: list[str] = Field(default_factory=list)  # each metric outside its tolerance, or the load
    notes: list[str] = Field(default_factory=list)  # what the rehearsal does not exercise (a planner, say)
    versions: dict[str, str] = Field(default_factory=dict)
    error: str | None = None  # why the deployment did not start, register, route or serve


def load_stats(rows: list[RequestRow], sla: SLATarget | None) -> LoadStats:
    """The summary of a run's per-request rows (see the module docstring)."""
    done = [r for r in rows if r.error is None and r.end_ms is not None and r.output_tokens > 0]
    ttft = [r.ttft_ms for r in done if r.ttft_ms is not None]
    itl = [r.itl_ms for r in done if r.itl_ms is not None and r.output_tokens > 1]
    span_s = (max(r.end_ms for r in done) - min(r.start_ms for r in rows)) / 1000.0 if done else 0.0
    good = [r for r in done if _meets(r, sla)]
    per_worker: dict[str, Counter[str]] = {}
    for r in done:
        for role, worker in r.workers.items():
            per_worker.setdefault(role, Counter())[worker] += 1
    return LoadStats(
        requests=len(rows),
        completed=len(done),
        ttft_mean_ms=_mean(ttft),
        ttft_p90_ms=_p90(ttft),
        itl_mean_ms=_mean(itl),
        itl_p90_ms=_p90(itl),
        output_tok_s=sum(r.output_tokens for r in done) / span_s if span_s > 0 else None,
        goodput_tok_s=sum(r.output_tokens for r in good) / span_s if span_s > 0 else None,
        sla_share=len(good) / len(rows) if rows and sla is not None else None,
        requests_per_worker={role: sorted(c.values(), reverse=True) for role, c in sorted(per_worker.items())},
        errors=[r.error for r in rows if r.error][:5],
    )


def differences(live: LoadStats, replay: LoadStats) -> dict[str, float]:
    """(live - replay) / replay for every compared metric both have (a replay value of 0 compares nothing); the SLA
    share, a share already, as live - replay."""
    out = {}
    for name in COMPARED:
        a, b = getattr(live, name), getattr(replay, name)
        if name == "sla_share" and a is not None and b is not None:
            out[name] = a - b
        elif a is not None and b:
            out[name] = (a - b) / b
    return out


def in_flight(rows: list[RequestRow]) -> int:
    """The requests a run carried in flight on average (Little's law: the sum of their times over the span)."""
    done = [r for r in rows if r.end_ms is not None]
    if not done:
        return 1
    span = max(r.end_ms for r in done) - min(r.start_ms for r in rows)
    return max(1, round(sum(r.end_ms - r.start_ms for r in done) / span)) if span > 0 else 1


def judge(found: Rehearsal) -> tuple[str, list[str]]:
    """The verdict (see TOLERANCES): "too loaded to judge latency" when the machine did not keep up (throughput
    is still held to its tolerance), else "agrees" or "differs", with each metric outside its tolerance."""
    diffs = {**found.differences}
    if found.closed_live is not None and found.closed_replay is not None:
        closed = differences(found.closed_live, found.closed_replay)
        if "output_tok_s" in closed:
            diffs["closed_output_tok_s"] = closed["output_tok_s"]
    loaded = [m for m in found.machine if not m.kept_up]
    outside = [
        f"{name} {100 * diff:+.1f} {'points' if name == 'sla_share' else '%'} (tolerance "
        f"{100 * TOLERANCES[name]:g}{' points' if name == 'sla_share' else ' %'})"
        for name, diff in diffs.items()
        if name in TOLERANCES and abs(diff) > TOLERANCES[name] and not (loaded and name in LATENCY)
    ]  # fmt: skip
    if loaded:
        runs = dict(zip(("open", "closed"), found.machine, strict=False))
        reasons = [f"the machine during the {run} loop: {m.words()} (its limits: {100 * BUSY_LIMIT:.0f} % busy, "
                   f"{LAG_LIMIT_MS:g} ms late at p90)" for run, m in runs.items() if not m.kept_up]  # fmt: skip
        return ("differs" if outside else "too loaded to judge latency"), [*outside, *reasons]
    return ("differs" if outside else "agrees"), outside


def replay_rows(table: Any, roles: Iterable[str]) -> list[RequestRow]:
    """Rows from the replay's per-request table (a pandas DataFrame of Dynamo's per-request report)."""
    roles = list(roles)
    rows = []
    for record in table.to_dict("records"):
        completed = record.get("terminal_status") == "completed"
        workers = {}
        for role in roles:
            column = "prefill_worker_idx" if role == "prefill" else "decode_worker_idx"
            if record.get(column) is not None and not _missing(record.get(column)):
                workers[role] = str(int(record[column]))
        rows.append(RequestRow(
            start_ms=float(record["arrival_time_ms"]),
            end_ms=float(record["last_token_ms"]) if completed and not _missing(record.get("last_token_ms")) else None,
            ttft_ms=_float(record.get("ttft_ms")), itl_ms=_float(record.get("itl_ms")),
            output_tokens=int(record.get("output_length") or 0) if completed else 0,
            workers=workers, error=None if completed else str(record.get("terminal_status")),
        ))  # fmt: skip
    return rows


def _meets(row: RequestRow, sla: SLATarget | None) -> bool:
    if sla is None:
        return True
    e2e = row.end_ms - row.start_ms if row.end_ms is not None else None
    checks = ((sla.ttft_ms, row.ttft_ms), (sla.itl_ms, row.itl_ms), (sla.e2e_ms, e2e))
    return all(value is not None and value <= bound for bound, value in checks if bound is not None)


def _mean(values: list[float]) -> float | None:
    return float(np.mean(values)) if values else None


def _p90(values: list[float]) -> float | None:
    return float(np.percentile(values, 90)) if values else None


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and np.isnan(value))


def _float(value: Any) -> float | None:
    return None if _missing(value) else float(value)
