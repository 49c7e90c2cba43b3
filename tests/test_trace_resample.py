"""Fresh traffic from a trace: a block bootstrap keeps the trace's size, rate, lengths and real prefix sharing."""

import json

import numpy as np
import pytest
from conftest import TRACE, build, config_data
from scipy.stats import ks_2samp

from spica_lib.traces.scan import scan_trace
from spica_lib.traces.resample import blocks_for, resample_trace, resampled_records
from spica_lib.results.finish import needs_replay, sample_kind

RESAMPLES = 12


def records(path):
    return [json.loads(line) for line in open(path, encoding="utf-8") if line.strip()]


@pytest.fixture(scope="module")
def resamples(tmp_path_factory):
    folder = tmp_path_factory.mktemp("splits")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SPICA_TRACE_SPLITS", str(folder))
        paths = [resample_trace(TRACE, i) for i in range(RESAMPLES)]
    return records(TRACE), [records(p) for p in paths], paths


def test_a_resample_keeps_the_trace_s_request_count_span_rate_and_length_distributions(resamples):
    # The bounds docs/benchmarks/finish.md states for the shipped trace ("Fresh traffic from a trace", from
    # bench/trace_resample.py: the largest moves over 200 resamples, rounded up).
    original, samples, _ = resamples
    span = scan_trace(TRACE).duration_ms
    inputs, outputs = (np.array([r[name] for r in original]) for name in ("input_length", "output_length"))
    for sample in samples:
        stamps = [r["timestamp"] for r in sample]
        assert stamps == sorted(stamps) and 0 <= stamps[0] and stamps[-1] <= span + 1  # the same span
        assert abs(len(sample) / len(original) - 1) <= 0.05  # request count, and so the rate, within 5 %
        fresh_in, fresh_out = (np.array([r[name] for r in sample]) for name in ("input_length", "output_length"))
        assert abs(fresh_in.mean() / inputs.mean() - 1) <= 0.25 and ks_2samp(fresh_in, inputs).statistic <= 0.16
        assert abs(fresh_out.mean() / outputs.mean() - 1) <= 0.30 and ks_2samp(fresh_out, outputs).statistic <= 0.16


def test_resamples_differ_from_each_other_and_are_the_same_bytes_when_rebuilt(resamples, tmp_path, monkeypatch):
    _, samples, paths = resamples
    assert len({json.dumps(s) for s in samples}) == RESAMPLES
    monkeypatch.setenv("SPICA_TRACE_SPLITS", str(tmp_path))
    again = resample_trace(TRACE, 3)
    assert again != paths[3] and open(again, "rb").read() == open(paths[3], "rb").read()


def test_every_repeated_copy_of_a_window_gets_an_id_space_of_its_own_so_no_copy_hits_another_copy_s_cache():
    # Three windows: A uses its own ids 1, 2 and the shared 9; B uses 3 and 9; C uses 4 and 9.
    trace = [
        {"timestamp": 0, "input_length": 512, "output_length": 4, "hash_ids": [9, 1]},
        {"timestamp": 10, "input_length": 512, "output_length": 4, "hash_ids": [9, 1, 2]},
        {"timestamp": 100, "input_length": 512, "output_length": 4, "hash_ids": [9, 3]},
        {"timestamp": 250, "input_length": 512, "output_length": 4, "hash_ids": [9, 4]},
        {"timestamp": 299, "input_length": 512, "output_length": 4, "hash_ids": [9, 4]},
    ]

    class Draws:  # a fixed draw: window A, window A again, window C
        def integers(self, low, high, size):
            return np.array([0, 0, 2])

    out = resampled_records(trace, 3, Draws())
    assert [r["timestamp"] for r in out] == [0, 10, 100, 110, 250, 299]  # laid end to end, offsets kept
    first, second = out[:2], out[2:4]
    assert [r["hash_ids"] for r in first] == [[9, 1], [9, 1, 2]]
    assert [r["hash_ids"] for r in second] == [[19, 11], [19, 11, 12]]  # every id renamed above the trace's (stride 10)
    assert {h for r in second for h in r["hash_ids"]} & {h for r in first for h in r["hash_ids"]} == set()
    # The first copy of each window keeps the trace's ids: windows A and C still share 9, as recorded. (Format 1
    # kept 9 in A's second copy too, since the trace uses it in C as well: that copy then hit blocks only A's
    # first copy had written, C coming later.)
    assert out[0]["hash_ids"][0] == 9 and all(r["hash_ids"][0] == 9 for r in out[4:])


def test_a_repeated_copy_keeps_an_id_only_when_another_window_laid_before_it_uses_it():
    trace = [
        {"timestamp": 0, "input_length": 512, "output_length": 4, "hash_ids": [9, 1]},
        {"timestamp": 100, "input_length": 512, "output_length": 4, "hash_ids": [8, 3]},
        {"timestamp": 250, "input_length": 512, "output_length": 4, "hash_ids": [9, 4]},
        {"timestamp": 299, "input_length": 512, "output_length": 4, "hash_ids": [9, 4]},
    ]

    class Draws:  # window C, then window A twice
        def integers(self, low, high, size):
            return np.array([2, 0, 0])

    out = resampled_records(trace, 3, Draws())
    # C came first and uses 9 (a system prompt, say): A's second copy may find it cached. Its own 1 is renamed.
    assert [r["hash_ids"] for r in out] == [[9, 4], [9, 4], [9, 1], [9, 11]]


def test_the_block_length_gives_ten_windows_of_at_least_a_minute():
    assert blocks_for(3_600_000) == 10 and blocks_for(1_022_025) == 10
    assert blocks_for(300_000) == 5 and blocks_for(20_000) == 2


def test_a_trace_without_a_holdout_is_finished_on_resamples_round_robin_included(tmp_path, monkeypatch):
    monkeypatch.setenv("SPICA_TRACE_SPLITS", str(tmp_path))
    data = config_data(search_space={"router_mode": ["round_robin"], "gpu_budget": 16})
    data["workload"] = {"trace_path": str(TRACE)}
    data["goal"] = {"target": "goodput_per_gpu", "sla": {"ttft_ms": 5000, "itl_ms": 50}}
    cfg = build(data)
    assert sample_kind(cfg) == "bootstrap" and cfg.sweep.finish_samples == 4
    from test_sequential_finish import top_of

    (spec, _), = top_of(cfg, {"rr": 4}).values()
    assert needs_replay(spec, "bootstrap", 0) and needs_replay(spec, "bootstrap", 3)
    fresh = spec.on_fresh_sample(1)
    assert fresh.trace_sha256 != spec.trace_sha256 and fresh.replay.screen is None
    assert fresh.trace_sha256 == scan_trace(fresh.replay.workload.trace_path).sha256
    assert fresh.key() != spec.key() != spec.on_fresh_sample(2).key()
