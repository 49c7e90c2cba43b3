"""A trial's SLA adjustment (replay/sla_adjust.py) from its config: the calibration's per-request overhead for the
trial's backend, and, with `goal.sla_safety: measured`, the bounds tightened by that calibration's measured
held-out error (the 90th percentile of how much slower silicon was than predicted)."""

from __future__ import annotations

from spica_lib.config import SmartSearchConfig
from spica_lib.replay.sla_adjust import SlaAdjustment


def sla_adjustment(config: SmartSearchConfig, backend: str, closed_loop: bool) -> SlaAdjustment | None:
    """None when nothing is adjusted (no calibration overhead, no safety margin): the trial keeps its key."""
    calibration = config.calibration
    scale = calibration.scales.get(backend) if calibration is not None else None
    if scale is None:
        return None
    overhead = scale.ttft_overhead_ms
    ttft_factor = itl_factor = 1.0
    sources = [f"{overhead:.0f} ms per request's TTFT ({calibration.source})"] if overhead else []
    if config.goal.sla_safety == "measured" and scale.held_out is not None:
        held = scale.held_out  # config/root.py refused a safety margin the calibration did not measure
        ttft_factor = 1.0 / (1.0 + max(0.0, held.ttft_under_p90 or 0.0))
        itl_factor = 1.0 / (1.0 + max(0.0, held.tpot_under_p90 or 0.0))
        sources.append(f"SLA bounds x{ttft_factor:.3f} (TTFT), x{itl_factor:.3f} (ITL): the held-out error's p90")
    adjust = SlaAdjustment(ttft_overhead_ms=overhead, ttft_factor=ttft_factor, itl_factor=itl_factor,
                           closed_loop=closed_loop and overhead > 0, source="; ".join(sources))  # fmt: skip
    return None if adjust.is_identity else adjust
