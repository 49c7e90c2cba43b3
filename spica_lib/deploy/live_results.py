"""What the live client saw, as the rows a rehearsal compares (deploy/rehearsal.py), and the check that every role
was reached: a role none of whose workers served a request is a failure, whatever the latencies say."""

from __future__ import annotations

from pathlib import Path

from spica_lib.deploy.live_client import LiveRequest
from spica_lib.deploy.live_plan import COMPONENT
from spica_lib.deploy.live_processes import RehearsalFailed
from spica_lib.deploy.rehearsal import RequestRow


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
