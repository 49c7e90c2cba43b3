"""Replay a measured row as it was measured, estimate it statically, and report the errors per group.

Each supported row becomes one agg engine of its shape on its system and backend (the pinned perf
DB, not the version measured), fed a closed loop of its concurrency with its ISL/OSL, round robin,
no planner, with the engine settings of a replay protocol (fidelity/protocol.py) and the other
knobs at the reference's first values. The replay's mean TTFT, mean ITL (TPOT) and
output tokens/s per GPU are compared with the measured ones, and so is the static estimate
(pools/estimate.py: aiconfigurator's per-step timings in a steady state).
"""

from __future__ import annotations

import statistics
import tempfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from spica_lib.config import SmartSearchConfig
from spica_lib.facts.calibration import StepScale
from spica_lib.facts.catalog import model_source, resolve_backend_version
from spica_lib.fidelity.aiconfigurator_estimate import aiconfigurator_disagg_estimate, aiconfigurator_estimate
from spica_lib.fidelity.checkpoint import checkpoint_precision, fmha_dtype
from spica_lib.fidelity.protocol import DISAGG_PROTOCOL, MEASURED, ReplayProtocol, disagg_settings
from spica_lib.fidelity.silicon import CALIBRATION_SOURCE, SiliconRow, tokens_per_second_per_gpu
from spica_lib.pools.estimate import StepModel, Traffic, estimate_layout
from spica_lib.pools.knobs import branch_knob_choices
from spica_lib.trial.evaluate import evaluate_trials, prepare_trial
from spica_lib.trial.spec import TrialResult, TrialSpec

METRICS = ("ttft_ms", "tpot_ms", "tokens_per_second_per_gpu")
REQUESTS_PER_SLOT = 8  # each of the `concurrency` slots sends this many requests in turn
ROW_TIME_LIMIT_SECONDS = 300.0


class Point(BaseModel):
    """One row's mean TTFT, TPOT and output tokens/s per GPU: measured, replayed or estimated."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    ttft_ms: float
    tpot_ms: float
    tokens_per_second_per_gpu: float
    ttft_p90_ms: float | None = None  # where measured (an AIPerf export) or replayed
    tpot_p90_ms: float | None = None


class RowCheck(BaseModel):
    """One row: what was measured, what the replay and the estimate say, or why it was not replayed."""

    model_config = ConfigDict(extra="forbid")

    row: SiliconRow
    perf_db_version: str | None = None
    measured: Point
    replayed: Point | None = None
    estimated: Point | None = None
    aiconfigurator: Point | None = None  # aiconfigurator's own agg estimate (fidelity/aiconfigurator_estimate.py)
    aiconfigurator_failed: str | None = None  # why it gave none
    skipped: str | None = None
    protocol: str | None = None  # the ReplayProtocol's name (None: a check written before protocols existed)
    engine: dict[str, int] = {}  # the engine settings the row was replayed with
    ttft_after_opening_wave_ms: float | None = None  # the replay's mean TTFT without the first `concurrency` requests


def unsupported_reason(row: SiliconRow) -> str | None:
    """Why this stack cannot replay the row as measured, or None."""
    if row.mode == "disagg" and row.backend == "trtllm":
        return "TRT-LLM disaggregated: no replay protocol for TRT-LLM disagg engines is written down"
    if row.mode == "disagg":
        assert row.prefill is not None and row.decode is not None
        for role, shape in (("prefill", row.prefill), ("decode", row.decode)):
            if shape.attention_dp > 1:
                return (f"attention DP in the {role} role: Dynamo's offline disagg replay takes none (dp_size 1 in "
                        "both roles)")  # fmt: skip
    if model_source(row.model) is None:
        return f"model {row.model} has no configuration available offline"
    if resolve_backend_version(row.system, row.backend) is None:
        return f"no perf database for {row.system} / {row.backend}"
    checkpoint = checkpoint_precision(row.model)
    if row.precision != checkpoint:
        replayed = f"{checkpoint} (its checkpoint's quantisation)" if checkpoint else "its own dtype"
        return f"measured in {row.precision or 'bf16'}, but the replay runs {row.model} in {replayed}"
    return None


def row_config(
    row: SiliconRow, scale: StepScale | None = None, protocol: ReplayProtocol = MEASURED
) -> SmartSearchConfig:
    """The one-engine, closed-loop sweep config the row describes, replayed by `protocol` (with `scale`:
    calibrated by it)."""
    calibration = (
        {"file": "(fitted in this run)", "source": CALIBRATION_SOURCE,
         "scales": {row.backend: {"prefill": scale.prefill, "decode": scale.decode,
                                  "fitted_on": scale.model or "every model"}}}
        if scale is not None
        else None
    )  # fmt: skip
    if row.mode == "disagg":
        engine = {name: [value] for name, value in disagg_settings(row).items()}
        fmha = fmha_dtype(row)
        if fmha is not None:
            engine["aic_fmha_dtype"] = fmha
    else:
        engine = {f"agg_{name}": [value] for name, value in protocol.settings(row).items()}
    return SmartSearchConfig.from_mapping(
        {
            "calibration": calibration,
            "search_space": {
                "model_name": row.model,
                "hardware_sku": row.system,
                "gpu_budget": row.gpus,
                "deployment_mode": [row.mode],
                "backend": [row.backend],
                "router_mode": ["round_robin"],
                "planner_scaling_policy": ["disabled"],
                **engine,
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


def check_row(row: SiliconRow, scale: StepScale | None = None, protocol: ReplayProtocol = MEASURED) -> RowCheck:
    """One row replayed, estimated and compared (see check_rows)."""
    (check,) = check_rows([row], protocol, lambda _: scale)
    return check


def check_rows(
    rows: list[SiliconRow],
    protocol: ReplayProtocol = MEASURED,
    scale_for: Callable[[SiliconRow], StepScale | None] = lambda _: None,
    parallel: int = 1,
    on_done: Callable[[RowCheck], None] | None = None,
) -> list[RowCheck]:
    """Replay the rows by `protocol`, `parallel` at a time (each row calibrated by `scale_for(row)`), estimate
    them, and compare; in the rows' order. `on_done` hears each check as it ends."""
    done: dict[str, RowCheck] = {}
    specs: dict[str, tuple[SiliconRow, TrialSpec, dict[str, Any]]] = {}
    for row in rows:
        prepared = _prepare(row, scale_for(row), protocol)
        if isinstance(prepared, RowCheck):
            done[row.id] = prepared
            if on_done is not None:
                on_done(prepared)
        else:
            specs[row.id] = (row, *prepared)
    with tempfile.TemporaryDirectory(prefix="spica-fidelity-") as folder:
        requests = {key: str(Path(folder) / f"{index}.parquet") for index, key in enumerate(specs)}
        results = evaluate_trials({key: spec for key, (_, spec, _) in specs.items()}, parallel=parallel,
                                  max_eval_seconds=ROW_TIME_LIMIT_SECONDS, per_request=requests)  # fmt: skip
        for key, result in results:
            row, _, known = specs[key]
            done[key] = _compared(row, known, result, Path(requests[key]), scale_for(row), protocol)
            Path(requests[key]).unlink(missing_ok=True)  # a long run keeps no more than one row's requests
            if on_done is not None:
                on_done(done[key])
    return [done[row.id] for row in rows]


def _prepare(
    row: SiliconRow, scale: StepScale | None, protocol: ReplayProtocol
) -> RowCheck | tuple[TrialSpec, dict[str, Any]]:
    """The row's trial and what is known of it before the replay, or its check if it cannot be replayed."""
    measured = Point(ttft_ms=row.ttft_ms, tpot_ms=row.tpot_ms, tokens_per_second_per_gpu=row.tokens_per_second_per_gpu,
                     ttft_p90_ms=row.ttft_p90_ms, tpot_p90_ms=row.tpot_p90_ms)  # fmt: skip
    name = protocol_name(row, protocol)
    reason = unsupported_reason(row)
    if reason is not None:
        return RowCheck(row=row, measured=measured, protocol=name, skipped=reason)
    version = resolve_backend_version(row.system, row.backend)
    config = row_config(row, scale, protocol)
    choices = branch_knob_choices(config.search_space, row.mode)
    selection = {"deployment_mode": row.mode, "backend": row.backend, **{k: v[0] for k, v in choices.items()}}
    engine = {k.removeprefix("agg_"): int(v) for k, v in selection.items() if "_max_num_" in k}
    known = {"row": row, "measured": measured, "perf_db_version": version, "protocol": name, "engine": engine}
    try:
        return prepare_trial(config, selection, row.layout, backend_version=version), known
    except Exception as exc:  # a shape the stack refuses is reported, not raised
        return RowCheck(**known, skipped=f"not buildable: {exc}")


def protocol_name(row: SiliconRow, protocol: ReplayProtocol) -> str:
    """The protocol a row is replayed by: `protocol` for an agg row, the disagg one for a disagg row."""
    return DISAGG_PROTOCOL if row.mode == "disagg" else protocol.name


def _compared(
    row: SiliconRow, known: dict[str, Any], result: TrialResult, requests: Path, scale: StepScale | None,
    protocol: ReplayProtocol,
) -> RowCheck:  # fmt: skip
    if result.status != "feasible":
        return RowCheck(**known, skipped=f"{result.status}: {result.reason}")
    metrics = result.metrics
    replayed = Point(
        ttft_ms=metrics["mean_ttft_ms"],
        tpot_ms=metrics["mean_itl_ms"],
        tokens_per_second_per_gpu=metrics["output_throughput_tok_s"] / row.gpus,
        ttft_p90_ms=metrics.get("p90_ttft_ms"),
        tpot_p90_ms=metrics.get("p90_itl_ms"),
    )
    version = known["perf_db_version"]
    try:
        estimated = _estimate(row, version, scale)
    except Exception as exc:  # the perf DB lacks a table the estimate reads: reported with the row, not raised
        return RowCheck(**known, skipped=f"static estimate failed: {type(exc).__name__}: {exc}")
    aiconfigurator, failed = _aiconfigurator(row, version, protocol) if scale is None else (None, None)
    return RowCheck(
        **known,
        replayed=replayed,
        estimated=estimated,
        aiconfigurator=aiconfigurator,
        aiconfigurator_failed=failed,
        ttft_after_opening_wave_ms=_ttft_after_opening_wave(requests, row.concurrency),
    )


def _aiconfigurator(row: SiliconRow, version: str, protocol: ReplayProtocol) -> tuple[Point | None, str | None]:
    """aiconfigurator's own estimate (uncalibrated: it takes no step scale), or why it gave none."""
    try:
        if row.mode == "disagg":
            ttft, tpot, tokens = aiconfigurator_disagg_estimate(row, version, disagg_settings(row))
        else:
            ttft, tpot, tokens = aiconfigurator_estimate(row, version, protocol.settings(row)["max_num_batched_tokens"])
    except Exception as exc:  # its failure on one row is reported with the row, not raised
        return None, f"{type(exc).__name__}: {exc}"
    return Point(ttft_ms=ttft, tpot_ms=tpot, tokens_per_second_per_gpu=tokens), None


def _ttft_after_opening_wave(requests: Path, concurrency: int) -> float | None:
    """Mean TTFT without the closed loop's first `concurrency` requests (the ones all sent at time 0), as a
    client that discards its warm-up would report it."""
    import pandas as pd

    if not requests.exists():
        return None
    frame = pd.read_parquet(requests, columns=["arrival_time_ms", "ttft_ms"]).sort_values("arrival_time_ms", kind="stable")
    later = frame["ttft_ms"].iloc[concurrency:].dropna()
    return float(later.mean()) if len(later) else None


def _estimate(row: SiliconRow, version: str, scale: StepScale | None) -> Point:
    scales = {row.backend: (scale.prefill, scale.decode)} if scale is not None else None
    model = StepModel(row.model, row.system, {row.backend: version}, scales, fmha_dtype(row) if row.mode == "disagg" else None)
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
    """Errors over the replayed rows of one (system, backend, model[, ISL/OSL]): MAPE and signed bias, in percent."""

    model_config = ConfigDict(extra="forbid")

    system: str
    backend: str
    model: str
    isl_osl: str | None = None  # "ISL/OSL" when grouped by it (the disagg table)
    rows: int
    skipped: int
    replay_mape: dict[str, float]
    replay_bias: dict[str, float]
    estimate_mape: dict[str, float]
    estimate_bias: dict[str, float]
    aiconfigurator_mape: dict[str, float] = {}  # empty: aiconfigurator gave no estimate for some replayed row
    aiconfigurator_bias: dict[str, float] = {}


def group_errors(checks: Iterable[RowCheck], by_shape: bool = False) -> list[GroupError]:
    """Per (system, backend, model), and with `by_shape` per ISL/OSL too."""
    groups: dict[tuple[str, str, str, str | None], list[RowCheck]] = {}
    for check in checks:
        row = check.row
        shape = f"{row.isl}/{row.osl}" if by_shape else None
        groups.setdefault((row.system, row.backend, row.model, shape), []).append(check)
    out = []
    for (system, backend, model, shape), members in sorted(groups.items(), key=lambda item: str(item[0])):
        done = [c for c in members if c.replayed is not None]
        if not done:
            continue
        replay = {m: _errors(done, "replayed", m) for m in METRICS}
        estimate = {m: _errors(done, "estimated", m) for m in METRICS}
        theirs = {m: _errors(done, "aiconfigurator", m) for m in METRICS} if all(c.aiconfigurator for c in done) else {}
        out.append(
            GroupError(
                system=system,
                backend=backend,
                model=model,
                isl_osl=shape,
                rows=len(done),
                skipped=len(members) - len(done),
                replay_mape={m: e[0] for m, e in replay.items()},
                replay_bias={m: e[1] for m, e in replay.items()},
                estimate_mape={m: e[0] for m, e in estimate.items()},
                estimate_bias={m: e[1] for m, e in estimate.items()},
                aiconfigurator_mape={m: e[0] for m, e in theirs.items()},
                aiconfigurator_bias={m: e[1] for m, e in theirs.items()},
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
    """One line per group: rows replayed (skipped), then MAPE / bias for TTFT, TPOT and tokens/s/GPU for the
    replay, the static estimate and (where it gave one for every replayed row) aiconfigurator's estimate."""
    by_shape = any(g.isl_osl for g in groups)
    sources = [("replay", "replay"), ("estimate", "estimate")]
    if any(g.aiconfigurator_mape for g in groups):
        sources.append(("aiconfigurator", "aiconfigurator"))
    names = [f"{label} {metric}" for _, label in sources for metric in ("TTFT", "TPOT", "tok/s/GPU")]
    head = ["system", "backend", "model", *(["ISL/OSL"] if by_shape else []), "rows (skipped)", *names]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for g in groups:
        cells = [g.system, g.backend, g.model, *([g.isl_osl or ""] if by_shape else []), f"{g.rows} ({g.skipped})"]
        for source, _ in sources:
            mape, bias = getattr(g, f"{source}_mape"), getattr(g, f"{source}_bias")
            cells += [f"{mape[m]:.0f} % ({bias[m]:+.0f} %)" if m in mape else "—" for m in METRICS]
        lines.append("| " + " | ".join(cells) + " |")
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


def percentile_table(checks: Iterable[RowCheck]) -> str | None:
    """The replay's p90 TTFT and ITL against the measured p90s, per group, for the rows that measured them (None:
    no row did). Means and p90s side by side: a replay right on the mean can still miss the tail."""
    groups: dict[tuple[str, str, str], list[RowCheck]] = {}
    for c in checks:
        if c.replayed is not None and c.measured.ttft_p90_ms and c.replayed.ttft_p90_ms:
            groups.setdefault((c.row.system, c.row.backend, c.row.model), []).append(c)
    if not groups:
        return None
    lines = ["| system | backend | model | rows with p90s | TTFT mean | TTFT p90 | TPOT mean | TPOT p90 |",
             "|---|---|---|---:|---|---|---|---|"]  # fmt: skip
    for (system, backend, model), members in sorted(groups.items()):
        cells = []
        for metric in ("ttft_ms", "ttft_p90_ms", "tpot_ms", "tpot_p90_ms"):
            pairs = [(getattr(c.measured, metric), getattr(c.replayed, metric)) for c in members]
            pairs = [(m, r) for m, r in pairs if m and r is not None]
            mape = 100 * sum(abs(r / m - 1) for m, r in pairs) / len(pairs) if pairs else None
            bias = 100 * sum(r / m - 1 for m, r in pairs) / len(pairs) if pairs else None
            cells.append("—" if mape is None else f"{mape:.0f} % ({bias:+.0f} %)")
        lines.append(f"| {system} | {backend} | {model} | {len(members)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
