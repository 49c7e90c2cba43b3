"""aiconfigurator's own estimate of a measured row: its agg (continuous-batching) model at the row's shape,
or for a disagg row its disagg model (`DisaggInferenceSession.run_disagg`) at each role's shape and workers.

The third source next to the replay and our static estimate: aiconfigurator's `run_agg` for a batch
of the row's concurrency, its ISL/OSL and the protocol's chunked-prefill budget (`ctx_tokens`), on
the same pinned perf DB. Its TTFT and TPOT give tokens/s per GPU by the same formula as the
measurement's (silicon.tokens_per_second_per_gpu), so the three sources are compared alike.
"""

from __future__ import annotations

import functools
import logging
from typing import Any

from spica_lib.fidelity.checkpoint import fmha_dtype
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


def aiconfigurator_disagg_estimate(row: SiliconRow, version: str, engine: dict[str, int]) -> tuple[float, float, float]:
    """(TTFT ms, TPOT ms, output tokens/s per GPU) by aiconfigurator's disagg model: the prefill role's static
    latency at its batch, the decode role's at the closed loop's share per decode worker (capped by the
    protocol's max_num_seqs). tokens/s per GPU by the measurement's formula at the row's concurrency, not
    aiconfigurator's rate matching (which answers another question: the best rate of the pair)."""
    from aiconfigurator.sdk.inference_session import DisaggInferenceSession
    from aiconfigurator_core.sdk import config
    from aiconfigurator_core.sdk.backends.factory import get_backend

    assert row.prefill is not None and row.decode is not None
    database = _database(row.system, row.backend, version)
    session = DisaggInferenceSession(database, get_backend(row.backend), database, get_backend(row.backend))

    from aiconfigurator_core.sdk import common

    fmha = fmha_dtype(row)
    quant = {"fmha_quant_mode": common.FMHAQuantMode[fmha]} if fmha else {}

    def shape(role):
        return config.ModelConfig(tp_size=role.tp, attention_dp_size=role.attention_dp, moe_tp_size=role.moe_tp,
                                  moe_ep_size=role.moe_ep, **quant)  # fmt: skip

    decode_batch = min(engine["decode_max_num_seqs"], -(-row.concurrency // row.decode.workers))
    runtime = config.RuntimeConfig(batch_size=decode_batch, isl=row.isl, osl=row.osl)
    summary = session.run_disagg(row.model, runtime, shape(row.prefill), engine["prefill_max_num_seqs"],
                                 row.prefill.workers, shape(row.decode), decode_batch, row.decode.workers)  # fmt: skip
    frame = summary.get_summary_df()
    ttft, tpot = float(frame["ttft"].iloc[0]), float(frame["tpot"].iloc[0])
    return ttft, tpot, tokens_per_second_per_gpu(row.concurrency, row.osl, ttft, tpot, row.gpus)


@functools.cache
def _database(system: str, backend: str, version: str) -> Any:
    from aiconfigurator_core.sdk.perf_database import get_database

    for name in ("aiconfigurator", "aiconfigurator_core"):  # its perf DB warns of every fallback table
        logging.getLogger(name).setLevel(logging.ERROR)
    return get_database(system, backend, version)
