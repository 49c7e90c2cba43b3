"""What the installed Dynamo replay accepts: the facts behind REPLAY_UNSUPPORTED.

If a Dynamo upgrade starts replaying TRT-LLM disaggregated, the first test fails and the exclusion
in spica_lib/branches.py should go.
"""

import os

import pytest

from spica_lib.facts.catalog import resolve_backend_version
from spica_lib.pools.branches import REPLAY_UNSUPPORTED

pytestmark = pytest.mark.slow


def disagg_replay(backend: str):
    os.environ.setdefault("DYN_LOG", "error")
    from dynamo.mocker import MockEngineArgs
    from dynamo.replay import run_synthetic_trace_replay

    version = resolve_backend_version("h200_sxm", backend)

    def engine(role: str) -> MockEngineArgs:
        return MockEngineArgs(
            engine_type=backend,
            worker_type=role,
            aic_backend=backend,
            aic_system="h200_sxm",
            aic_model_path="Qwen/Qwen3-32B",
            aic_backend_version=version,
            aic_tp_size=2,
            block_size=64,
            max_num_seqs=64,
            max_num_batched_tokens=8192,
        )

    return run_synthetic_trace_replay(
        512,
        32,
        20,
        prefill_engine_args=engine("prefill"),
        decode_engine_args=engine("decode"),
        num_prefill_workers=1,
        num_decode_workers=1,
        request_rate=10.0,
    )


def test_trtllm_disaggregated_replay_is_refused():
    assert ("disagg", "trtllm") in REPLAY_UNSUPPORTED
    with pytest.raises(Exception, match="does not support TRT-LLM"):
        disagg_replay("trtllm")


def test_vllm_disaggregated_replay_runs():
    report = disagg_replay("vllm")
    summary = report.summary if hasattr(report, "summary") else report
    assert summary["completed_requests"] == 20
