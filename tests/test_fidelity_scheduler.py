"""The engine's scheduler in the replay protocol: each backend's settings as its documentation and aiconfigurator's
benchmark rules state them, each one shown to move a real replay of the pinned mocker (a setting that does nothing
is not set), a replayed row's TTFT in its two parts, and replays kept by trial and versions."""

from __future__ import annotations

import os

import pytest

from spica_lib.fidelity import check as check_module
from spica_lib.fidelity.check import _prepare, check_rows
from spica_lib.fidelity.protocol import AIC_BENCHMARK, CHUNK_2048, ENGINE_DEFAULT, ReplayProtocol
from spica_lib.fidelity.replay_cache import ReplayCache
from spica_lib.fidelity.silicon import aggregated_rows
from spica_lib.trial.evaluate import evaluate_trials

os.environ.setdefault("DYN_LOG", "error")
SGLANG = "qwen_qwen3_32b_qwen_qwen3_32b_h100_sxm_sglang_agg_1024x128_c16_tp2_epnone_1"
TRTLLM = "qwen_qwen3_235b_a22b_fp8_qwen_qwen3_235b_a22b_fp8_h100_sxm_trtllm_agg_512x128_c64_tp4_epnone_46"
VLLM = "qwen_qwen3_32b_qwen_qwen3_32b_h100_sxm_vllm_agg_1024x128_c8_tp2_epnone_1"


def row(row_id):
    return next(r for r in aggregated_rows() if r.id == row_id)


def replayed_ttft(row_id: str, protocol: ReplayProtocol, **engine) -> float:
    """The row's mean TTFT replayed by `protocol` with `engine` set over its engine arguments."""
    spec, _ = _prepare(row(row_id), None, protocol)
    plan = spec.replay.plan
    plan = plan.model_copy(update={"agg_engine_args": {**plan.agg_engine_args, **engine}})
    spec = spec.model_copy(update={"replay": spec.replay.model_copy(update={"plan": plan})})
    ((_, result),) = list(evaluate_trials({"row": spec}, max_eval_seconds=300))
    assert result.status == "feasible", result.reason
    return result.metrics["mean_ttft_ms"]


def test_each_backend_is_set_as_its_benchmark_rule_and_its_documented_defaults_say():
    sglang, trtllm, vllm = row(SGLANG), row(TRTLLM), row(VLLM)
    # aiconfigurator's benchmark rules: SGLang's prefill budget is ISL + 1500 (its chunk SGLang's default on an
    # 80 GB GPU); TRT-LLM's token budget is rounded up to 32-token blocks and its template leaves chunking off.
    assert AIC_BENCHMARK.settings(sglang) == {"max_num_seqs": 16, "sglang": {"chunked_prefill_size": 8192,
                                                                            "max_prefill_tokens": 1024 + 1500}}  # fmt: skip
    assert AIC_BENCHMARK.settings(trtllm) == {"max_num_batched_tokens": 2080, "max_num_seqs": 64,
                                              "enable_chunked_prefill": False}  # 64 + 512 + 1500 = 2076 -> 2080
    assert AIC_BENCHMARK.settings(vllm) == {"max_num_batched_tokens": 8 + 1024 + 1500, "max_num_seqs": 8}
    assert ENGINE_DEFAULT.settings(vllm) == {"max_num_batched_tokens": 8192, "max_num_seqs": 1024}
    assert ENGINE_DEFAULT.settings(trtllm) == {"max_num_batched_tokens": 8192, "max_num_seqs": 2048,
                                               "enable_chunked_prefill": False}  # fmt: skip
    b200 = sglang.model_copy(update={"system": "b200_sxm"})  # 180 GB: SGLang's larger default chunk
    assert ENGINE_DEFAULT.settings(b200)["sglang"] == {"chunked_prefill_size": 16384, "max_prefill_tokens": 16384}
    assert CHUNK_2048.settings(sglang) == {"max_num_seqs": 256, "sglang": {"chunked_prefill_size": 2048}}
    assert AIC_BENCHMARK.prefill_budget(sglang) == 2524 and AIC_BENCHMARK.prefill_budget(trtllm) == 2080


def test_every_setting_a_protocol_gives_moves_the_replay_and_the_ones_it_leaves_out_do_not():
    # SGLang's engine reads its own budgets, not max_num_batched_tokens: the protocol sets only what it reads.
    plain = replayed_ttft(SGLANG, ENGINE_DEFAULT)
    assert replayed_ttft(SGLANG, ENGINE_DEFAULT, max_num_batched_tokens=512) == pytest.approx(plain, rel=1e-9)
    assert replayed_ttft(SGLANG, ENGINE_DEFAULT, sglang={"chunked_prefill_size": 512}) < 0.8 * plain
    assert replayed_ttft(SGLANG, AIC_BENCHMARK) < 0.8 * plain  # its prefill budget of ISL + 1500
    # TRT-LLM reads its token budget and its chunked-prefill switch; its one capacity policy is the default.
    benchmark = replayed_ttft(TRTLLM, AIC_BENCHMARK)
    assert replayed_ttft(TRTLLM, AIC_BENCHMARK, enable_chunked_prefill=True) != pytest.approx(benchmark, rel=1e-3)
    assert replayed_ttft(TRTLLM, AIC_BENCHMARK, max_num_batched_tokens=8192) > 1.2 * benchmark
    policy = {"capacity_scheduler_policy": "guaranteed_no_evict"}
    assert replayed_ttft(TRTLLM, AIC_BENCHMARK, trtllm=policy) == pytest.approx(benchmark, rel=1e-9)


def test_a_replayed_rows_ttft_is_its_queue_wait_plus_admit_to_first_token_and_a_second_run_reads_it_back(
    tmp_path, monkeypatch
):
    cache = ReplayCache(tmp_path / "cache")
    (first,) = check_rows([row(TRTLLM)], AIC_BENCHMARK, cache=cache)
    parts = first.parts
    assert parts is not None and parts.ttft_ms == pytest.approx(first.replayed.ttft_ms, rel=1e-6)
    assert parts.queue_ms > 0 and parts.admit_to_token_ms > 0  # 64 prompts at time 0 queue for a 2080-token budget
    assert parts.after_wave_queue_ms < parts.queue_ms  # after the opening wave the loop has drifted out of step
    assert first.engine == AIC_BENCHMARK.settings(row(TRTLLM))

    def fake_evaluate_that_must_not_run(*args, **kwargs):
        raise AssertionError("a kept replay was replayed again")

    monkeypatch.setattr(check_module, "evaluate_trials", fake_evaluate_that_must_not_run)
    (again,) = check_rows([row(TRTLLM)], AIC_BENCHMARK, cache=cache)
    assert again.replayed == first.replayed and again.parts == first.parts
    # Another protocol is another trial, and another Dynamo another key: neither is read from the cache.
    with pytest.raises(AssertionError, match="replayed again"):
        check_rows([row(TRTLLM)], CHUNK_2048, cache=cache)
    cache.versions = {**cache.versions, "ai-dynamo": "0.0.0"}
    with pytest.raises(AssertionError, match="replayed again"):
        check_rows([row(TRTLLM)], AIC_BENCHMARK, cache=cache)
