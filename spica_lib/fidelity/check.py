"""Replay a measured row as it was measured, estimate it statically, and report the errors per group.

Each supported row becomes one agg engine of its shape on its system and backend (the pinned perf
DB, not the version measured), fed a closed loop of its concurrency with its ISL/OSL, round robin,
no planner, with the engine settings of a replay protocol (fidelity/protocol.py) and the other
knobs at the reference's first values. The replay's mean TTFT, mean ITL (TPOT) and
output tokens/s per GPU are compared with the measured ones, and so is the static estimate
(pools/estimate.py: aiconfigurator's per-step timings in a steady state). From the replay's per-request
records the mean TTFT is split into queue wait and admit-to-first-token (fidelity/attribution.py). With a
`ReplayCache`, a row already replayed by the same trial and versions is read back (fidelity/replay_cache.py).
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict

from spica_lib.config import SmartSearchConfig
from spica_lib.facts.calibration import StepScale
from spica_lib.facts.catalog import model_source, resolve_backend_version
from spica_lib.fidelity.aiconfigurator_estimate import aiconfigurator_disagg_estimate, aiconfigurator_estimate
from spica_lib.fidelity.attribution import TtftParts, ttft_parts
from spica_lib.fidelity.checkpoint import checkpoint_precision, fmha_dtype
from spica_lib.fidelity.protocol import DISAGG_PROTOCOL, MEASURED, ReplayProtocol, disagg_settings
from spica_lib.fidelity.silicon import CALIBRATION_SOURCE, SiliconRow, tokens_per_second_per_gpu
from spica_lib.pools.estimate import StepModel, Traffic, estimate_layout
from spica_lib.pools.knobs import branch_knob_choices
from spica_lib.trial.evaluate import evaluate_trials, prepare_trial
from spica_lib.trial.spec import TrialSpec

if TYPE_CHECKING:
    from spica_lib.fidelity.replay_cache import CachedReplay, ReplayCache

METRICS = ("ttft_ms", "tpot_ms", "tokens_per_second_per_gpu")
REQUESTS_PER_SLOT = 8  # each of the `concurrency` slots sends this many requests in turn
ROW_TIME_LIMIT_SECONDS = 300.0
KNOB_SETTINGS = ("max_num_batched_tokens", "max_num_seqs")  # a protocol's settings the search space has knobs for


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
    engine: dict[str, Any] = {}  # the engine settings the row was replayed with (its protocol's, fidelity/protocol.py)
    ttft_after_opening_wave_ms: float | None = None  # the replay's mean TTFT without the first `concurrency` requests
    parts: TtftParts | None = None  # the replay's mean TTFT as queue wait + admit-to-first-token (None: not recorded)


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
        settings = protocol.settings(row)
        engine = {f"agg_{name}": [settings[name]] for name in KNOB_SETTINGS if name in settings}
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
    cache: ReplayCache | None = None,
) -> list[RowCheck]:
    """Replay the rows by `protocol`, `parallel` at a time (each row calibrated by `scale_for(row)`), estimate
    them, and compare; in the rows' order. `on_done` hears each check as it ends. With `cache`, a row whose trial
    it holds is read back, and every new replay is kept there."""
    from spica_lib.fidelity.replay_cache import CachedReplay

    done: dict[str, RowCheck] = {}
    specs: dict[str, tuple[SiliconRow, TrialSpec, dict[str, Any]]] = {}

    def finish(row: SiliconRow, known: dict[str, Any], replay: CachedReplay) -> None:
        done[row.id] = _compared(row, known, replay, scale_for(row), protocol)
        if on_done is not None:
            on_done(done[row.id])

    for row in rows:
        prepared = _prepare(row, scale_for(row), protocol)
        if isinstance(prepared, RowCheck):
            done[row.id] = prepared
            if on_done is not None:
                on_done(prepared)
        elif cache is not None and (kept := cache.get(prepared[0].key())) is not None:
            finish(row, prepared[1], kept)
        else:
            specs[row.id] = (row, *prepared)
    if not specs:  # every row refused or read back: no replay to start
        return [done[row.id] for row in rows]
    with tempfile.TemporaryDirectory(prefix="spica-fidelity-") as folder:
        requests = {key: str(Path(folder) / f"{index}.parquet") for index, key in enumerate(specs)}
        results = evaluate_trials({key: spec for key, (_, spec, _) in specs.items()}, parallel=parallel,
                                  max_eval_seconds=ROW_TIME_LIMIT_SECONDS, per_request=requests)  # fmt: skip
        for key, result in results:
            row, spec, known = specs[key]
            found = ttft_parts(Path(requests[key]), row.concurrency) if result.status == "feasible" else None
            Path(requests[key]).unlink(missing_ok=True)  # a long run keeps no more than one row's requests
            replay = CachedReplay(trial_key=spec.key(), versions=cache.versions if cache else {}, status=result.status,
                                  reason=result.reason, metrics=result.metrics, parts=found[0] if found else None,
                                  ttft_after_opening_wave_ms=found[1] if found else None)  # fmt: skip
            if cache is not None:
                cache.put(replay)
            finish(row, known, replay)
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
    if row.mode == "disagg":
        engine: dict[str, Any] = {k: int(v) for k, v in selection.items() if "_max_num_" in k}
    else:
        engine = protocol.settings(row)
    known = {"row": row, "measured": measured, "perf_db_version": version, "protocol": name, "engine": engine}
    try:
        spec = prepare_trial(config, selection, row.layout, backend_version=version)
    except Exception as exc:  # a shape the stack refuses is reported, not raised
        return RowCheck(**known, skipped=f"not buildable: {exc}")
    return (_with_scheduler(spec, engine) if row.mode == "agg" else spec), known


def _with_scheduler(spec: TrialSpec, settings: dict[str, Any]) -> TrialSpec:
    """The trial with the protocol's settings the search space has no knob for (TRT-LLM's chunked prefill switch,
    SGLang's own prefill budgets) set on its engine: the key then hashes them too."""
    extra = {k: v for k, v in settings.items() if k not in KNOB_SETTINGS}
    if not extra:
        return spec
    plan = spec.replay.plan
    plan = plan.model_copy(update={"agg_engine_args": {**plan.agg_engine_args, **extra}})
    return spec.model_copy(update={"replay": spec.replay.model_copy(update={"plan": plan})})


def protocol_name(row: SiliconRow, protocol: ReplayProtocol) -> str:
    """The protocol a row is replayed by: `protocol` for an agg row, the disagg one for a disagg row."""
    return DISAGG_PROTOCOL if row.mode == "disagg" else protocol.name


def _compared(
    row: SiliconRow, known: dict[str, Any], replay: CachedReplay, scale: StepScale | None, protocol: ReplayProtocol
) -> RowCheck:
    if replay.status != "feasible":
        return RowCheck(**known, skipped=f"{replay.status}: {replay.reason}")
    metrics = replay.metrics
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
        ttft_after_opening_wave_ms=replay.ttft_after_opening_wave_ms,
        parts=replay.parts,
    )


def _aiconfigurator(row: SiliconRow, version: str, protocol: ReplayProtocol) -> tuple[Point | None, str | None]:
    """aiconfigurator's own estimate (uncalibrated: it takes no step scale), or why it gave none."""
    try:
        if row.mode == "disagg":
            ttft, tpot, tokens = aiconfigurator_disagg_estimate(row, version, disagg_settings(row))
        else:
            ttft, tpot, tokens = aiconfigurator_estimate(row, version, protocol.prefill_budget(row))
    except Exception as exc:  # its failure on one row is reported with the row, not raised
        return None, f"{type(exc).__name__}: {exc}"
    return Point(ttft_ms=ttft, tpot_ms=tpot, tokens_per_second_per_gpu=tokens), None


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
