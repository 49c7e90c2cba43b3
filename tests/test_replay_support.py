"""What the installed Dynamo replay accepts: the facts behind spica_lib/facts/replay_limits.py.

Each limit written down there is replayed here on the installed version. If a Dynamo upgrade starts
replaying one of them, its test fails and the limit should go.
"""

import os

import pytest

from spica_lib.base.versions import package_versions
from spica_lib.facts.catalog import resolve_backend_version
from spica_lib.facts.parallel import DisaggConfig, ParallelShape, ReplicaConfig
from spica_lib.facts.replay_limits import FOUND_ON, is_layout_refusal, layout_limit, mode_limit

pytestmark = pytest.mark.slow


def disagg_replay(backend: str, model: str = "Qwen/Qwen3-32B", prefill_dp: int = 1):
    os.environ.setdefault("DYN_LOG", "error")
    from dynamo.mocker import MockEngineArgs
    from dynamo.replay import run_synthetic_trace_replay

    version = resolve_backend_version("h200_sxm", backend)

    def engine(role: str, tp: int, dp: int) -> MockEngineArgs:
        moe = {"aic_moe_tp_size": 1, "aic_moe_ep_size": tp * dp} if model != "Qwen/Qwen3-32B" else {}
        return MockEngineArgs(
            engine_type=backend,
            worker_type=role,
            aic_backend=backend,
            aic_system="h200_sxm",
            aic_model_path=model,
            aic_backend_version=version,
            aic_tp_size=tp,
            aic_attention_dp_size=dp,
            block_size=64,
            max_num_seqs=64,
            max_num_batched_tokens=8192,
            **moe,
        )

    return run_synthetic_trace_replay(
        512,
        32,
        20,
        prefill_engine_args=engine("prefill", 1, prefill_dp) if prefill_dp > 1 else engine("prefill", 2, 1),
        decode_engine_args=engine("decode", 2, 1),
        num_prefill_workers=1,
        num_decode_workers=1,
        request_rate=10.0,
    )


def test_the_limits_were_found_on_the_installed_dynamo():
    assert package_versions()["ai-dynamo"] == FOUND_ON


def test_trtllm_disaggregated_replay_is_refused():
    assert mode_limit("disagg", "trtllm")
    with pytest.raises(Exception, match="does not support TRT-LLM") as caught:
        disagg_replay("trtllm")
    assert is_layout_refusal(str(caught.value))


def test_disaggregated_attention_dp_is_refused():
    layout = DisaggConfig(
        prefill=ReplicaConfig(shape=ParallelShape(tp=1, attention_dp=2, moe_ep=2)),
        decode=ReplicaConfig(shape=ParallelShape(tp=2, moe_ep=2)),
    )
    assert layout_limit(layout)
    with pytest.raises(Exception, match="does not support attention DP") as caught:
        disagg_replay("sglang", "Qwen/Qwen3-30B-A3B", prefill_dp=2)
    assert is_layout_refusal(str(caught.value))


def test_disaggregated_moe_without_attention_dp_runs():
    report = disagg_replay("sglang", "Qwen/Qwen3-30B-A3B")
    summary = report.summary if hasattr(report, "summary") else report
    assert summary["completed_requests"] == 20


def test_vllm_disaggregated_replay_runs():
    report = disagg_replay("vllm")
    summary = report.summary if hasattr(report, "summary") else report
    assert summary["completed_requests"] == 20
