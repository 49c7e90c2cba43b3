"""Search on a sample, decide on the whole: the stratified sample of a long trace, its size rule, and what replays it."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import build, config_data, rejected

from spica_lib.traces.scan import scan_trace
from spica_lib.traces.sample import STRATA, sample_size, sampled_records
from spica_lib.run.job_memory import largest_input_tokens, search_input_tokens


def day_trace(path, requests=12_000, seed=0):
    """A day of arrivals whose rate follows a diurnal curve (4x from trough to peak), distinct KV blocks."""
    rng = np.random.default_rng(seed)
    hours = np.arange(24)
    weight = 1 + 1.5 * (1 - np.cos(2 * np.pi * (hours - 4) / 24))  # lowest at 04:00, highest at 16:00
    per_hour = rng.multinomial(requests, weight / weight.sum())
    stamps = np.sort(np.concatenate([h * 3_600_000 + rng.uniform(0, 3_600_000, n) for h, n in zip(hours, per_hour, strict=True)]))
    lines = [json.dumps({"timestamp": int(t), "input_length": 512, "output_length": 32, "hash_ids": [i]})
             for i, t in enumerate(stamps)]  # fmt: skip
    path.write_text("\n".join(lines) + "\n")
    return path


def test_a_stratified_sample_keeps_the_traces_shape_over_the_day_and_draws_nothing_twice(tmp_path):
    records = [json.loads(line) for line in day_trace(tmp_path / "day.jsonl").read_text().splitlines()]
    sample = sampled_records(records, 2_000 / len(records), np.random.default_rng(1))
    assert 1_800 <= len(sample) <= 2_200
    ids = [r["hash_ids"][0] for r in sample]
    assert len(ids) == len(set(ids))  # no record (and so no KV block) twice
    stamps = [r["timestamp"] for r in sample]
    assert stamps == sorted(stamps) and stamps[-1] <= 24 * 3_600_000 / 6 + 1  # a sixth of the span, end to end
    # The diurnal shape survives: the busiest of the sample's strata is the afternoon's, the quietest the night's.
    per_stratum = np.histogram(stamps, bins=STRATA, range=(0, stamps[-1] + 1))[0]
    assert np.argmax(per_stratum) in range(12, 16) and np.argmin(per_stratum) in (*range(0, 5), 19)
    # Deterministic: the same seed, the same sample.
    assert sampled_records(records, 2_000 / len(records), np.random.default_rng(1)) == sample


def test_the_size_rule_covers_the_slas_tail_the_loads_strata_and_long_enough_stretches():
    day, hour = 86_400_000.0, 3_600_000.0
    assert sample_size(12_000, None, day) == 2_000 and sample_size(3_999, None, day) is None  # under twice: whole
    assert sample_size(100_000, 99, day) == 2_778  # stretches of two minutes: 100k x 20 x 2 min / 24 h
    assert sample_size(100_000, 99.9, day) == 20_000  # 20 requests beyond the 99.9th percentile
    # A 12k-request hour: two-minute stretches need 8,020 of its requests, more than half: searched whole.
    assert sample_size(12_031, None, hour) is None


def trace_config(tmp_path, **sweep):
    trace = day_trace(tmp_path / "day.jsonl")
    data = config_data(workload={"isl": None, "osl": None, "request_rate": None, "num_request_ratio": None,
                                 "trace_path": str(trace)}, sweep=sweep)  # fmt: skip
    return data


def test_auto_samples_a_long_trace_for_the_search_and_the_finish_resamples_the_whole(tmp_path, monkeypatch):
    monkeypatch.setenv("SPICA_TRACE_SPLITS", str(tmp_path / "splits"))
    cfg = build(trace_config(tmp_path, search_sample="auto", seed=3))
    assert (cfg.workload.search_requests, cfg.workload.search_seed) == (2_000, 3)
    part = cfg.workload.search_part()
    assert part.sampled_from == cfg.workload.trace_path and 1_800 <= scan_trace(part.trace_path).records <= 2_200
    fresh = part.fresh_sample(0)  # the finish: a resample of the whole trace, at its full size
    assert fresh.sampled_from is None and fresh.search_requests is None
    assert scan_trace(fresh.trace_path).records > 10_000
    # The search's replay jobs ask for the sample's memory, the others for the whole trace's.
    assert search_input_tokens(cfg) < largest_input_tokens(cfg) / 5
    # `auto` is the default; `full` searches whole, with the run id of before sampling existed.
    assert build(trace_config(tmp_path)).workload.search_requests == 2_000
    whole = build(trace_config(tmp_path, search_sample="full"))
    assert whole.workload.search_requests is None and "search_requests" not in whole.model_dump()["workload"]


def test_a_sample_that_cannot_be_taken_or_would_do_nothing_is_refused(tmp_path):
    rejected(trace_config(tmp_path, search_sample=50_000), "", "sweep.search_sample 50000 is not smaller than the")
    rejected(config_data(sweep={"search_sample": "auto"}), "", "samples a trace for the search; this config's traffic is synthetic")


@pytest.mark.slow
def test_a_sampled_trials_key_names_its_sample_and_its_source_by_content(tmp_path, monkeypatch):
    from spica_lib.facts.kv_capacity import KvEstimator
    from spica_lib.facts.parallel import ParallelShape, ReplicaConfig
    from spica_lib.trial.evaluate import prepare_trial

    monkeypatch.setenv("SPICA_TRACE_SPLITS", str(tmp_path / "splits"))
    selection = {"deployment_mode": "agg", "backend": "vllm", "router_mode": "round_robin",
                 "planner_scaling_policy": "disabled", "agg_max_num_batched_tokens": 8192, "agg_max_num_seqs": 256}  # fmt: skip
    layout = ReplicaConfig(shape=ParallelShape(tp=1), replicas=1)

    def spec(**sweep):
        cfg = build(trace_config(tmp_path, **sweep))
        return prepare_trial(cfg, selection, layout, backend_version="0.24.0",
                             estimator=KvEstimator("Qwen/Qwen3-32B", "h200_sxm", {"vllm": "0.24.0"}))  # fmt: skip

    sampled, again, other, whole = spec(search_sample=2_000), spec(search_sample=2_000), spec(search_sample=2_000, seed=1), spec()
    assert sampled.key() == again.key() and sampled.key() != other.key() != whole.key()
    assert sampled.trace_sha256 == scan_trace(sampled.replay.workload.trace_path).sha256
    moved = sampled.model_copy(deep=True)
    assert moved.key() == sampled.key()
