"""aiconfigurator's own estimate of a measured row: its agg (continuous-batching) model at the row's shape.

The third source next to the replay and our static estimate: aiconfigurator's `run_agg` for a batch
of the row's concurrency, its ISL/OSL and the protocol's chunked-prefill budget (`ctx_tokens`), on
the same pinned perf DB. Its TTFT and TPOT give tokens/s per GPU by the same formula as the
measurement's (silicon.tokens_per_second_per_gpu), so the three sources are compared alike.
"""

from __future__ import annotations

import functools
import logging
from typing import Any

from spica_lib.fidelity.silicon import SiliconRow, tokens_per_second_per_gpu


def aiconfigurator_estimate(row: SiliconRow, version: str, ctx_tokens: int) -> tuple[float, float, float]:
    """(TTFT ms, TPOT ms, output tokens/s per GPU) by aiconfigurator. Raises what aiconfigurator raises."""
    from aiconfigurator.sdk.inference_session import InferenceSession
    from aiconfigurator_core.sdk import config
    from aiconfigurator_core.sdk.backends.factory import get_backend
    from aiconfigurator_core.sdk.models import get_model

    # MoE widths are given even when 1: aiconfigurator refuses a MoE model without them, and a dense one ignores them.
    shape = config.ModelConfig(
        tp_size=row.tp, attention_dp_size=row.attention_dp, moe_tp_size=row.moe_tp, moe_ep_size=row.moe_ep
    )
    session = InferenceSession(get_model(row.model, shape, row.backend), _database(row.system, row.backend, version),
                               get_backend(row.backend))  # fmt: skip
    runtime = config.RuntimeConfig(batch_size=row.concurrency, isl=row.isl, osl=row.osl)
    summary = session.run_agg(runtime, ctx_tokens=ctx_tokens).get_summary_df()
    ttft, tpot = float(summary["ttft"].iloc[0]), float(summary["tpot"].iloc[0])
    return ttft, tpot, tokens_per_second_per_gpu(row.concurrency, row.osl, ttft, tpot, row.gpus)


@functools.cache
def _database(system: str, backend: str, version: str) -> Any:
    from aiconfigurator_core.sdk.perf_database import get_database

    for name in ("aiconfigurator", "aiconfigurator_core"):  # its perf DB warns of every fallback table
        logging.getLogger(name).setLevel(logging.ERROR)
    return get_database(system, backend, version)
