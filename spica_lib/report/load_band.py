"""The measured error at the load the recommended deployment ran at (report-only: after the replay).

A calibration written by `spica fidelity --fit` keeps the held-out error of the config's model per concurrency band
(fidelity/bands.py): the replay's error differs by load, so one MAPE over every row says little about the load a
deployment actually serves. The winner's load is read from its own replay: requests in flight per engine, by
Little's law (request rate x mean end-to-end latency, over the agg replicas or the disagg decode workers: the
measured rows' concurrency is one engine's). The band holding it is named with its error. Nothing is changed
by it: the replay, the ranking and the SLA judgement are the same with or without this line.
"""

from __future__ import annotations

from spica_lib.facts.parallel import DisaggConfig
from spica_lib.trial.spec import TrialRecord


def engine_load(record: TrialRecord) -> float | None:
    """Requests in flight per engine over the winner's replay (None: its metrics do not say)."""
    metrics = record.result.metrics
    rate, e2e = metrics.get("request_throughput_rps"), metrics.get("mean_e2e_latency_ms")
    if not rate or not e2e:
        return None
    layout = record.spec.parallel_config
    engines = layout.decode.replicas if isinstance(layout, DisaggConfig) else layout.replicas
    return rate * e2e / 1000.0 / engines


def load_band_lines(config, record: TrialRecord) -> list[str]:
    """The report's lines on the winner's load and the calibration's measured error there (none without bands)."""
    calibration = config.calibration
    backend = record.spec.selection.get("backend")
    scale = calibration.scales.get(backend) if calibration is not None and backend else None
    held = scale.held_out if scale is not None else None
    if held is None or not held.load_bands:
        return []
    load = engine_load(record)
    if load is None:
        return []
    measured = ", ".join(f"{b.label()} ({b.rows} rows)" for b in held.load_bands)
    band = held.band_for(load)
    ran = f"It ran at {load:.1f} requests in flight per engine (its replay's request rate × mean E2E latency, per engine)"
    if band is None:
        return ["", f"{ran}: the calibration has no held-out row of this model at that load (bands measured: "
                f"{measured}), so its error there is not measured."]  # fmt: skip
    return ["", f"{ran}. The calibration's held-out rows of this model with {band.label()} requests in flight: TTFT "
            f"{band.ttft_mape:.0f} % MAPE ({band.uncalibrated_ttft_mape:.0f} % uncalibrated), TPOT {band.tpot_mape:.0f} % "
            f"({band.uncalibrated_tpot_mape:.0f} %), over {band.rows} rows (every band: {measured}). Report-only: the "
            "replay did not use it."]  # fmt: skip
