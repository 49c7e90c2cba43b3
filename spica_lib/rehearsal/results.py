"""What the live client saw, as the rows a rehearsal compares (rehearsal/record.py), and the check that every role
was reached: a role none of whose workers served a request is a failure, whatever the latencies say."""

from __future__ import annotations

from pathlib import Path

from spica_lib.rehearsal.client import ClientRun, LiveRequest
from spica_lib.deploy.live_plan import COMPONENT, role_workers
from spica_lib.rehearsal.processes import RehearsalFailed
from spica_lib.rehearsal.record import MachineLoad, Rehearsal, RequestRow
from spica_lib.replay.plan import DeploymentPlan


def live_rows(
    sent: list[LiveRequest], components: dict[str, str], roles: dict, speedup: float
) -> list[RequestRow]:  # fmt: skip
    """The client's timings as rows in the replay's time (scaled back by the speed-up), each worker by role."""
    decode_role = "agg" if "agg" in roles else "decode"
    rows = []
    for r in sent:
        workers = {}
        if "prefill" in roles and r.prefill_worker and components.get(r.prefill_worker) == COMPONENT["prefill"]:
            workers["prefill"] = r.prefill_worker
        if r.decode_worker and components.get(r.decode_worker) == COMPONENT[decode_role]:
            workers[decode_role] = r.decode_worker
        ttft = (r.first_token - r.sent) * 1000 * speedup if r.first_token is not None else None
        itl = (
            (r.last_token - r.first_token) / (r.tokens - 1) * 1000 * speedup if r.tokens > 1 and r.first_token else None
        )
        rows.append(RequestRow(
            start_ms=r.sent * 1000 * speedup, end_ms=r.last_token * 1000 * speedup if r.last_token else None,
            ttft_ms=ttft, itl_ms=itl, output_tokens=r.tokens if r.error is None else 0, workers=workers, error=r.error,
        ))  # fmt: skip
    return rows


def unreached(rows: list[RequestRow], roles: dict, frontend_log: Path) -> None:
    """A role none of whose workers served a request: the router never reached it."""
    served = {role for r in rows if r.error is None for role in r.workers}
    missing = [role for role in roles if role not in served]
    if missing:
        errors = sorted({r.error for r in rows if r.error})[:3]
        raise RehearsalFailed(
            f"the router never reached the {', '.join(missing)} workers: no request was served there "
            f"(request errors: {errors or 'none'}); the frontend's log {frontend_log}"
        )


def machine_load(run: ClientRun) -> MachineLoad:
    """Whether the machine kept up with one traffic run (rehearsal/record.py: MachineLoad)."""
    lags = sorted(run.loop_lag_ms) or [0.0]
    return MachineLoad(cores=run.cores, busy_share=run.busy_share, loop_lag_p90_ms=lags[int(0.9 * (len(lags) - 1))],
                       loop_lag_max_ms=lags[-1])  # fmt: skip


def run_rows(
    sent: list[ClientRun], components: dict[str, str], plan: DeploymentPlan, speedup: float, frontend_log: Path,
    found: Rehearsal,
) -> list[list[RequestRow]]:  # fmt: skip
    """Each traffic run's rows in the replay's time, the machine's load during each (into `found`), and a role the
    first run never reached, a failure."""
    found.live_seconds = sum(run.wall_seconds for run in sent)
    found.machine = [machine_load(run) for run in sent]
    rows = [live_rows(run.requests, components, role_workers(plan), speedup) for run in sent]
    unreached(rows[0], role_workers(plan), frontend_log)
    return rows
