"""Replay a measured row as it was measured, estimate it statically, and report the errors per group.

Each supported row becomes one agg engine of its shape on its system and backend (the pinned perf
DB, not the version measured), fed a closed loop of its concurrency with its ISL/OSL, round robin,
no planner, knobs at the reference's first values. The replay's mean TTFT, mean ITL (TPOT) and
output tokens/s per GPU are compared with the measured ones, and so is the static estimate
(pools/estimate.py: aiconfigurator's per-step timings in a steady state).
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Iterator

from pydantic import BaseModel, ConfigDict

from spica_lib.config import SmartSearchConfig
from spica_lib.facts.calibration import StepScale
from spica_lib.facts.catalog import model_source, resolve_backend_version
from spica_lib.fidelity.silicon import CALIBRATION_SOURCE, SiliconRow, tokens_per_second_per_gpu
from spica_lib.pools.estimate import StepModel, Traffic, estimate_layout
from spica_lib.pools.knobs import branch_knob_choices
from spica_lib.trial.evaluate import evaluate_trial, prepare_trial

METRICS = ("ttft_ms", "tpot_ms", "tokens_per_second_per_gpu")
REQUESTS_PER_SLOT = 8  # each of the `concurrency` slots sends this many requests in turn
ROW_TIME_LIMIT_SECONDS = 300.0


class Point(BaseModel):
    """One row's mean TTFT, TPOT and output tokens/s per GPU: measured, replayed or estimated."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    ttft_ms: float
    tpot_ms: float
    tokens_per_second_per_gpu: float


class RowCheck(BaseModel):
    """One row: what was measured, what the replay and the estimate say, or why it was not replayed."""

    model_config = ConfigDict(extra="forbid")

    row: SiliconRow
    perf_db_version: str | None = None
    measured: Point
    replayed: Point | None = None
    estimated: Point | None = None
    skipped: str | None = None


def unsupported_reason(row: SiliconRow) -> str | None:
    """Why this stack cannot replay the row as measured, or None."""
    if model_source(row.model) is None:
        return f"model {row.model} has no configuration available offline"
    if resolve_backend_version(row.system, row.backend) is None:
        return f"no perf database for {row.system} / {row.backend}"
    quantised = _declares_quantisation(row.model)
    if bool(row.precision) != quantised:
        dtype = "a quantised checkpoint" if quantised else "its own dtype"
        return f"measured in {row.precision or 'bf16'}, but the replay runs {row.model} in {dtype}"
    return None


def _declares_quantisation(model: str) -> bool:
    from aiconfigurator_core.sdk.utils import get_model_config_from_model_path

    raw = get_model_config_from_model_path(model).get("raw_config") or {}
    return "quantization_config" in raw


def row_config(row: SiliconRow, scale: StepScale | None = None) -> SmartSearchConfig:
    """The one-engine, closed-loop sweep config the row describes (with `scale`: calibrated by it)."""
    calibration = (
        {"file": "(fitted in this run)", "source": CALIBRATION_SOURCE,
         "scales": {row.backend: {"prefill": scale.prefill, "decode": scale.decode,
                                  "fitted_on": scale.model or "every model"}}}
        if scale is not None
        else None
    )  # fmt: skip
    return SmartSearchConfig.from_mapping(
        {
            "calibration": calibration,
            "search_space": {
                "model_name": row.model,
                "hardware_sku": row.system,
                "gpu_budget": row.gpus,
                "deployment_mode": ["agg"],
                "backend": [row.backend],
                "router_mode": ["round_robin"],
                "planner_scaling_policy": ["disabled"],
                "agg_max_num_seqs": [max(256, row.concurrency)],
            },
            "workload": {
                "isl": row.isl,
                "osl": row.osl,
                "concurrency": row.concurrency,
                "num_request_ratio": REQUESTS_PER_SLOT,
            },
            "goal": {"target": "throughput_per_gpu"},
            "sweep": {"screen_fraction": None, "max_eval_seconds": ROW_TIME_LIMIT_SECONDS},
        }
    )


def check_row(row: SiliconRow, scale: StepScale | None = None) -> RowCheck:
    measured = Point(ttft_ms=row.ttft_ms, tpot_ms=row.tpot_ms, tokens_per_second_per_gpu=row.tokens_per_second_per_gpu)
    reason = unsupported_reason(row)
    if reason is not None:
        return RowCheck(row=row, measured=measured, skipped=reason)
    version = resolve_backend_version(row.system, row.backend)
    config = row_config(row, scale)
    choices = branch_knob_choices(config.search_space, "agg")
    selection = {"deployment_mode": "agg", "backend": row.backend, **{k: v[0] for k, v in choices.items()}}
    try:
        spec = prepare_trial(config, selection, row.layout, backend_version=version)
    except Exception as exc:  # a shape the stack refuses is reported, not raised
        return RowCheck(row=row, measured=measured, perf_db_version=version, skipped=f"not buildable: {exc}")
    result = evaluate_trial(spec, max_eval_seconds=config.sweep.max_eval_seconds)
    if result.status != "feasible":
        return RowCheck(
            row=row, measured=measured, perf_db_version=version, skipped=f"{result.status}: {result.reason}"
        )
    metrics = result.metrics
    replayed = Point(
        ttft_ms=metrics["mean_ttft_ms"],
        tpot_ms=metrics["mean_itl_ms"],
        tokens_per_second_per_gpu=metrics["output_throughput_tok_s"] / row.gpus,
    )
    return RowCheck(
        row=row, measured=measured, perf_db_version=version, replayed=replayed, estimated=_estimate(row, version, scale)
    )


def _estimate(row: SiliconRow, version: str, scale: StepScale | None) -> Point:
    scales = {row.backend: (scale.prefill, scale.decode)} if scale is not None else None
    model = StepModel(row.model, row.system, {row.backend: version}, scales)
    traffic = Traffic(isl=row.isl, osl=row.osl, concurrency=row.concurrency)
    estimate = estimate_layout(model, row.layout, row.backend, traffic)
    return Point(
        ttft_ms=estimate.ttft_ms,
        tpot_ms=estimate.itl_ms,
        tokens_per_second_per_gpu=tokens_per_second_per_gpu(
            row.concurrency, row.osl, estimate.ttft_ms, estimate.itl_ms, row.gpus
        ),
    )


class GroupError(BaseModel):
    """Errors over the replayed rows of one (system, backend, model): MAPE and signed bias, in percent."""

    model_config = ConfigDict(extra="forbid")

    system: str
    backend: str
    model: str
    rows: int
    skipped: int
    replay_mape: dict[str, float]
    replay_bias: dict[str, float]
    estimate_mape: dict[str, float]
    estimate_bias: dict[str, float]


def group_errors(checks: Iterable[RowCheck]) -> list[GroupError]:
    groups: dict[tuple[str, str, str], list[RowCheck]] = {}
    for check in checks:
        groups.setdefault((check.row.system, check.row.backend, check.row.model), []).append(check)
    out = []
    for (system, backend, model), members in sorted(groups.items()):
        done = [c for c in members if c.replayed is not None]
        if not done:
            continue
        replay = {m: _errors(done, "replayed", m) for m in METRICS}
        estimate = {m: _errors(done, "estimated", m) for m in METRICS}
        out.append(
            GroupError(
                system=system,
                backend=backend,
                model=model,
                rows=len(done),
                skipped=len(members) - len(done),
                replay_mape={m: e[0] for m, e in replay.items()},
                replay_bias={m: e[1] for m, e in replay.items()},
                estimate_mape={m: e[0] for m, e in estimate.items()},
                estimate_bias={m: e[1] for m, e in estimate.items()},
            )
        )
    return out


def _errors(checks: list[RowCheck], source: str, metric: str) -> tuple[float, float]:
    """(MAPE, mean signed error) in percent of the measured value."""
    relative = [
        (getattr(getattr(c, source), metric) - getattr(c.measured, metric)) / getattr(c.measured, metric)
        for c in checks
    ]
    return 100.0 * statistics.fmean(abs(r) for r in relative), 100.0 * statistics.fmean(relative)


def select_rows(
    rows: Iterable[SiliconRow], systems: list[str], backends: list[str], models: list[str] | None = None
) -> Iterator[SiliconRow]:
    for row in rows:
        if row.system in systems and row.backend in backends and (not models or row.model in models):
            yield row


def markdown_table(groups: list[GroupError]) -> str:
    """One line per group: rows replayed (skipped), then MAPE / bias for TTFT, TPOT and tokens/s/GPU."""
    head = (
        "| system | backend | model | rows (skipped) | replay TTFT | replay TPOT | replay tok/s/GPU "
        "| estimate TTFT | estimate TPOT | estimate tok/s/GPU |\n|---|---|---|---|---|---|---|---|---|---|"
    )
    lines = [head]
    for g in groups:
        cells = [f"{g.replay_mape[m]:.0f} % ({g.replay_bias[m]:+.0f} %)" for m in METRICS]
        cells += [f"{g.estimate_mape[m]:.0f} % ({g.estimate_bias[m]:+.0f} %)" for m in METRICS]
        lines.append(f"| {g.system} | {g.backend} | {g.model} | {g.rows} ({g.skipped}) | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def held_out_table(before: list[RowCheck], *after: list[RowCheck]) -> str:
    """Per group, the replay's MAPE (bias) on the same rows without calibration, then with each calibration."""
    lines = [
        "| system | backend | model | held-out rows | TTFT | TPOT | tok/s/GPU |",
        "|---|---|---|---|---|---|---|",
    ]
    calibrated = [{(g.system, g.backend, g.model): g for g in group_errors(checks)} for checks in after]
    for g in group_errors(before):
        steps = [g, *(c[(g.system, g.backend, g.model)] for c in calibrated)]
        cells = [" -> ".join(f"{e.replay_mape[m]:.0f} % ({e.replay_bias[m]:+.0f} %)" for e in steps) for m in METRICS]
        lines.append(f"| {g.system} | {g.backend} | {g.model} | {g.rows} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
