"""workload: the four load shapes, their rules, trace files, and request counts."""

import json

import pytest
from conftest import TRACE, build, config_data, rejected

from spica_lib.config import ConfigError

SYNTH = {"isl": None, "osl": None, "request_rate": None, "num_request_ratio": None}


def test_request_count_scales_with_the_load_driver():
    rate = build(config_data(workload={"request_rate": 25, "num_request_ratio": 4})).workload
    assert rate.resolved_request_count() == 100
    closed = build(config_data(workload={"request_rate": None, "concurrency": 256, "num_request_ratio": 10})).workload
    assert closed.resolved_request_count() == 2560
    assert closed.resolved_request_count(override=8) == 80
    assert closed.effective_in_flight_cap() == 256 and closed.effective_in_flight_cap(override=8) == 8
    assert rate.effective_in_flight_cap() is None
    assert rate.synthetic_arrival_interval_ms == 40.0


def test_kv_load_request_count_needs_the_candidates_concurrency():
    ratio = build(config_data(workload={"request_rate": None, "kv_load_ratio": 0.5})).workload
    with pytest.raises(ValueError, match="concurrency"):
        ratio.resolved_request_count()
    assert ratio.resolved_request_count(override=12) == 120


def test_concurrency_must_be_a_positive_whole_number():
    base = {"request_rate": None}
    rejected(config_data(workload={**base, "concurrency": 1.9}), "workload.concurrency")
    assert build(config_data(workload={**base, "concurrency": 4.0})).workload.concurrency == 4
    assert isinstance(build(config_data(workload={**base, "concurrency": 4})).workload.concurrency, int)
    rejected(config_data(workload={**base, "concurrency": 0}), "workload.concurrency", "must be a positive integer, got 0")
    rejected(config_data(workload={**base, "concurrency": [4, 8]}), "workload.concurrency")
    rejected(config_data(workload={**base, "concurrency": True}), "workload.concurrency")


def test_synthetic_needs_exactly_one_load_driver():
    rejected(
        config_data(workload={"request_rate": None}),
        "workload",
        "exactly one of request_rate, concurrency or kv_load_ratio",
    )
    rejected(config_data(workload={"concurrency": 8}), "workload", "exactly one", "request_rate", "concurrency")


def test_synthetic_needs_lengths_and_request_ratio():
    rejected(config_data(workload={"num_request_ratio": None}), "workload.num_request_ratio", "required by a synthetic")
    rejected(config_data(workload={"isl": None, "osl": None}), "workload.isl", "required by a synthetic")
    rejected(config_data(workload={"isl": None, "osl": None}), "workload.osl", "required by a synthetic")


@pytest.mark.parametrize("field", ["request_rate", "isl", "osl", "num_request_ratio"])
def test_synthetic_sizes_must_be_positive(field):
    rejected(config_data(workload={field: 0}), f"workload.{field}", "must be positive, got 0")


def test_every_problem_of_a_workload_is_reported_at_once_each_at_its_field():
    """The README promises every problem in one pass: four bad numbers and a stray setting, five messages."""
    workload = {"isl": -1, "osl": 0, "request_rate": -3.0, "num_request_ratio": -2, "arrival_speedup_ratio": 2.0}
    with pytest.raises(ConfigError) as caught:
        build(config_data(workload=workload))
    paths = [path for path, _ in caught.value.problems]
    assert sorted(paths) == sorted(f"workload.{name}" for name in workload), caught.value.problems
    assert dict(caught.value.problems)["workload.request_rate"] == "must be positive, got -3.0"


def test_replay_concurrency_is_for_traces_only():
    rejected(config_data(workload={"replay_concurrency": 8}), "workload.replay_concurrency", "is for trace workloads")


def test_scalar_kv_load_ratio_for_any_goal_and_ranges_only_for_pareto():
    scalar = build(config_data(workload={"request_rate": None, "kv_load_ratio": 0.6})).workload
    assert scalar.kv_load_ratio == 0.6 and scalar.kv_load_ratio_range is None
    rejected(config_data(workload={"request_rate": None, "kv_load_ratio": [0.2, 0.8]}), "", "only a 'pareto' goal")
    pareto = build(config_data(workload={"request_rate": None, "kv_load_ratio": [0.2, 0.8]}, goal={"target": "pareto"}))
    assert pareto.workload.kv_load_ratio_range == (0.2, 0.8)


def test_kv_load_ratio_above_one_oversubscribes_and_is_allowed():
    assert build(config_data(workload={"request_rate": None, "kv_load_ratio": 1.5})).workload.kv_load_ratio == 1.5


@pytest.mark.parametrize(
    "ratio, fragment, path",
    [
        ([], "exactly [min, max]", "workload.kv_load_ratio"),
        ([0.0], "exactly [min, max]", "workload.kv_load_ratio"),
        ([0.0, 0.5, 1.0], "exactly [min, max]", "workload.kv_load_ratio"),
        ([-0.1, 1.0], "finite and >= 0", "workload.kv_load_ratio"),
        ([1.0, 1.0], "min < max", "workload.kv_load_ratio"),
        (float("inf"), "finite", "workload.kv_load_ratio"),  # refused as a number, before the shape rules
        (-0.5, "finite and >= 0", "workload.kv_load_ratio"),
    ],
)
def test_bad_kv_load_ratios(ratio, fragment, path):
    data = config_data(workload={"request_rate": None, "kv_load_ratio": ratio}, goal={"target": "pareto"})
    rejected(data, path, fragment)


def trace_workload(path):
    return {**SYNTH, "trace_path": str(path)}


def test_trace_workload_resolves_relative_to_the_config_folder(tmp_path):
    (tmp_path / "traces").mkdir()
    copy = tmp_path / "traces" / "t.jsonl"
    copy.write_text(TRACE.read_text().splitlines()[0] + "\n")
    config = build(config_data(workload=trace_workload("traces/t.jsonl")), base_dir=tmp_path)
    assert config.workload.trace_path == str(copy.resolve())
    assert config.workload.is_trace_based and not config.workload.is_synthetic


def test_trace_must_exist(tmp_path):
    rejected(config_data(workload=trace_workload(tmp_path / "missing.jsonl")), "workload.trace_path", "does not exist")


@pytest.mark.parametrize(
    "line, fragment",
    [
        ("not json", "line 1 is not JSON"),
        ("[1, 2]", "not a JSON object"),
        (json.dumps({"timestamp": 0, "output_length": 3}), "input_length"),
        (json.dumps({"timestamp": -5, "input_length": 10, "output_length": 3}), "timestamp"),
        (json.dumps({"timestamp": 0, "input_length": "10", "output_length": 3}), "input_length"),
    ],
)
def test_trace_lines_must_be_mooncake_records(tmp_path, line, fragment):
    path = tmp_path / "bad.jsonl"
    path.write_text(line + "\n")
    rejected(config_data(workload=trace_workload(path)), "workload.trace_path", "not a Mooncake JSONL trace", fragment)


def test_a_bad_line_far_past_the_head_is_reported_with_its_number(tmp_path):
    lines = TRACE.read_text().splitlines()
    lines[2999] = json.dumps({"timestamp": 5, "input_length": 0, "output_length": 3})
    path = tmp_path / "late.jsonl"
    path.write_text("\n".join(lines) + "\n")
    rejected(config_data(workload=trace_workload(path)), "workload.trace_path", "line 3000", "input_length")


def test_a_trace_is_parsed_and_hashed_once_per_process():
    from spica_lib.traces.scan import _scan, scan_trace

    _scan.cache_clear()
    first = scan_trace(TRACE)
    for _ in range(3):
        assert scan_trace(TRACE) == first
    assert _scan.cache_info().misses == 1 and first.records == len(TRACE.read_text().splitlines())


def test_empty_trace_is_rejected(tmp_path):
    path = tmp_path / "empty.jsonl"
    path.write_text("\n\n")
    rejected(config_data(workload=trace_workload(path)), "workload.trace_path", "no records")


def test_trace_workload_rejects_synthetic_fields():
    data = config_data(workload={"trace_path": str(TRACE)})
    for field in ("isl", "osl", "request_rate", "num_request_ratio"):  # each by its path, in one pass
        rejected(data, f"workload.{field}", "a trace workload (trace_path set)", "would change nothing")


def test_trace_replay_concurrency_is_the_closed_loop_cap():
    w = build(config_data(workload={**trace_workload(TRACE), "replay_concurrency": 32})).workload
    assert w.effective_in_flight_cap() == 32 and w.effective_in_flight_cap(override=4) == 32
    rejected(config_data(workload={**trace_workload(TRACE), "replay_concurrency": 0}), "workload.replay_concurrency",
             "positive integer")


def test_arrival_speedup_must_be_positive():
    rejected(
        config_data(workload={**trace_workload(TRACE), "arrival_speedup_ratio": 0}), "workload.arrival_speedup_ratio"
    )
    w = build(config_data(workload={**trace_workload(TRACE), "arrival_speedup_ratio": 2.5})).workload
    assert w.arrival_speedup_ratio == 2.5


def test_only_the_mooncake_format_is_known():
    rejected(config_data(workload={**trace_workload(TRACE), "trace_format": "sharegpt"}), "workload.trace_format")


@pytest.mark.parametrize(
    "field, good, bad",
    [
        ("shared_prefix_ratio", 0.5, 1.5),
        ("num_prefix_groups", 4, -1),
        ("turns_per_session", 3, 0),
        ("inter_turn_delay_ms", 250.0, -1),
    ],
)
def test_synthetic_shape_bounds(field, good, bad):
    assert getattr(build(config_data(workload={field: good})).workload, field) == good
    rejected(config_data(workload={field: bad}), f"workload.{field}")


def test_nan_and_infinity_are_refused_with_their_field():
    rejected(config_data(workload={"request_rate": float("nan")}), "workload.request_rate", "finite")
    rejected(config_data(workload={"num_request_ratio": float("inf")}), "workload.num_request_ratio", "finite")
    data = config_data()
    data["goal"] = {"target": "goodput", "sla": {"ttft_ms": float("inf"), "itl_ms": 50}}
    rejected(data, "goal.sla.ttft_ms", "finite")


def test_settings_a_workload_shape_cannot_use_are_refused():
    # Synthetic prefix sharing and sessions mean nothing to a trace, which carries its own; the trace's speed-up
    # means nothing to synthetic traffic, whose load is its request rate or concurrency.
    for field, value in (("shared_prefix_ratio", 0.5), ("num_prefix_groups", 4), ("turns_per_session", 3),
                         ("inter_turn_delay_ms", 100.0)):  # fmt: skip
        rejected(config_data(workload={**trace_workload(TRACE), field: value}), f"workload.{field}",
                 "would change nothing")  # fmt: skip
    rejected(config_data(workload={"arrival_speedup_ratio": 2.0}), "workload.arrival_speedup_ratio",
             "would change nothing")  # fmt: skip
    # Their defaults are what a dumped config holds: it reads back.
    config = build(config_data(workload=trace_workload(TRACE)))
    assert build(config.model_dump(mode="json")) == config


def test_a_kept_scan_is_read_instead_of_the_trace_and_a_changed_trace_is_scanned_afresh(tmp_path, monkeypatch):
    import shutil

    from spica_lib.traces import scan as trace_module

    copy = tmp_path / "trace.jsonl"
    shutil.copy(TRACE, copy)
    monkeypatch.delenv(trace_module.SCANS_ENV, raising=False)
    assert trace_module.keep_scan(copy) is None  # outside a sweep nothing is written
    monkeypatch.setenv(trace_module.SCANS_ENV, str(tmp_path / "run" / ".trace-scans"))
    kept = trace_module.keep_scan(copy)
    scan = trace_module.scan_trace(copy)
    assert kept.is_file() and kept.parent == tmp_path / "run" / ".trace-scans"
    saved = trace_module.KeptScan.model_validate_json(kept.read_text())
    assert (saved.sha256, saved.records) == (scan.sha256, scan.records) == (trace_module.scan_trace(TRACE).sha256, 3993)
    # Another process (a fresh cache here) reads the kept scan, not the trace: a doctored one shows it.
    kept.write_text(saved.model_copy(update={"records": 7}).model_dump_json())
    trace_module._scan.cache_clear()
    assert trace_module.scan_trace(copy).records == 7
    # The trace changes: its size and time no longer match the kept scan, so it is scanned again.
    copy.write_text(copy.read_text() + TRACE.read_text().splitlines()[0] + "\n")
    trace_module._scan.cache_clear()
    assert trace_module.scan_trace(copy).records == 3994
