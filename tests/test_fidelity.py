"""`spica fidelity`: measured silicon rows read right, replayed as measured (real replay), errors computed right."""

import json

import pytest
from conftest import build, config_data

from spica_lib.cli.main import main
from spica_lib.config import ConfigError
from spica_lib.facts.calibration import StepScale, read_calibration
from spica_lib.fidelity.check import METRICS, check_row, unsupported_reason
from spica_lib.fidelity.tables import group_errors
from spica_lib.fidelity.fit import SPLIT, fits
from spica_lib.fidelity.protocol import CHUNK_2048, FIT_PROTOCOLS, MEASURED, SEARCH_DEFAULT
from spica_lib.fidelity.silicon import aggregated_rows, tokens_per_second_per_gpu
from spica_lib.trial.evaluate import prepare_trial

QWEN_H100 = "qwen_qwen3_32b_qwen_qwen3_32b_h100_sxm_vllm_agg_1024x128_c8_tp2_epnone_1"


def row(row_id):
    return next(r for r in aggregated_rows() if r.id == row_id)


def test_a_row_reads_as_measured_and_its_throughput_follows_from_ttft_and_tpot():
    qwen = row(QWEN_H100)
    assert (qwen.system, qwen.backend, qwen.model, qwen.precision) == ("h100_sxm", "vllm", "Qwen/Qwen3-32B", "")
    assert (qwen.isl, qwen.osl, qwen.concurrency, qwen.tp, qwen.gpus) == (1024, 128, 8, 2, 2)
    assert qwen.ttft_ms == pytest.approx(154.2481599) and qwen.tpot_ms == pytest.approx(18.0370482875)
    # 8 requests in flight, each living TTFT + 127 TPOT, 128 tokens each, over 2 GPUs.
    assert qwen.tokens_per_second_per_gpu == pytest.approx(8 * 128 * 1000 / (154.2481599 + 127 * 18.0370482875) / 2)
    assert tokens_per_second_per_gpu(1, 2, 100.0, 50.0, 1) == pytest.approx(2 * 1000 / 150)
    assert all(min(r.tp, r.attention_dp, r.moe_tp, r.moe_ep) >= 1 for r in aggregated_rows())  # blank or 0: 1


def test_a_moe_row_with_a_blank_attention_dp_spans_its_moe_width():
    moe = [r for r in aggregated_rows() if r.model == "Qwen/Qwen3-235B-A22B-FP8" and r.system == "h200_sxm"]
    widened = [r for r in moe if r.tp == 1 and r.moe_tp == 2]
    assert widened and all(r.attention_dp == 2 and r.gpus == 2 for r in widened)


def test_rows_this_stack_cannot_replay_as_measured_say_why():
    llama = next(r for r in aggregated_rows() if r.model == "meta-llama/Llama-3.1-70B")
    assert "no configuration available offline" in unsupported_reason(llama)
    fp8 = next(r for r in aggregated_rows() if r.model == "Qwen/Qwen3-32B" and r.precision == "fp8")
    assert unsupported_reason(fp8) == "measured in fp8, but the replay runs Qwen/Qwen3-32B in its own dtype"
    assert unsupported_reason(row(QWEN_H100)) is None


def test_a_row_is_replayed_as_measured_and_its_errors_are_relative_to_the_measurement(tmp_path, capsys):
    check = check_row(row(QWEN_H100))
    assert check.skipped is None and check.perf_db_version and check.replayed and check.estimated
    (group,) = group_errors([check])
    for metric in METRICS:
        measured, replayed = getattr(check.measured, metric), getattr(check.replayed, metric)
        assert group.replay_bias[metric] == pytest.approx(100 * (replayed - measured) / measured)
        assert group.replay_mape[metric] == pytest.approx(abs(group.replay_bias[metric]))
    out = tmp_path / "rows.json"
    code = main(["fidelity", "--system", "h100_sxm", "--model", "Qwen/Qwen3-32B", "--limit", "1", "--json", str(out)])
    printed = capsys.readouterr().out
    assert code == 0 and "| h100_sxm | vllm | Qwen/Qwen3-32B | 1 (0) |" in printed
    (saved,) = json.loads(out.read_text())
    assert saved["row"]["id"] == QWEN_H100 and saved["replayed"]["ttft_ms"] == pytest.approx(check.replayed.ttft_ms)


def test_protocols_set_the_engine_as_the_measurement_did_and_the_default_one_reproduces_the_row_s_ttft(
    tmp_path, capsys
):
    long = next(r for r in aggregated_rows() if r.id.startswith("qwen_qwen3_32b") and r.backend == "vllm" and r.isl == 4096
                and r.concurrency == 64)
    # aiconfigurator's benchmark rule for vLLM agg: batch size + ISL + 1500 tokens per step, batch capped at c.
    assert MEASURED.settings(long) == {"max_num_batched_tokens": 64 + 4096 + 1500, "max_num_seqs": 64}
    assert CHUNK_2048.settings(long) == {"max_num_batched_tokens": 2048, "max_num_seqs": 256}
    measured, search = check_row(row(QWEN_H100), protocol=MEASURED), check_row(row(QWEN_H100), protocol=SEARCH_DEFAULT)
    assert measured.engine == {"max_num_batched_tokens": 8 + 1024 + 1500, "max_num_seqs": 8}
    assert search.engine == {"max_num_batched_tokens": 8192, "max_num_seqs": 256}
    assert (measured.protocol, search.protocol) == ("aiconfigurator-benchmark", "search-default")
    # 8 prompts of 1k in one 8192-token step stay in lockstep: every request waits for the whole wave.
    truth = measured.measured.ttft_ms
    assert search.replayed.ttft_ms > 2 * truth
    assert abs(measured.replayed.ttft_ms - truth) < 0.5 * abs(search.replayed.ttft_ms - truth)
    # Without the opening wave (all 8 sent at time 0) the smaller budget's loop has drifted out of step: shorter.
    assert measured.ttft_after_opening_wave_ms < measured.replayed.ttft_ms
    # aiconfigurator's own agg estimate of the row, at the same budget.
    assert measured.aiconfigurator is not None and measured.aiconfigurator_failed is None
    assert 0 < measured.aiconfigurator.ttft_ms < 2 * truth and measured.aiconfigurator.tokens_per_second_per_gpu > 0
    out = tmp_path / "both.json"
    argv = ["fidelity", "--system", "h100_sxm", "--model", "Qwen/Qwen3-32B", "--limit", "1", "--compare-protocols"]
    assert main([*argv, "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "By replay protocol" in printed and "| h100_sxm | vllm | Qwen/Qwen3-32B | 1 | " in printed
    assert "| h100_sxm | vllm | Qwen/Qwen3-32B | 1024/128 | 1 | " in printed  # and per ISL/OSL
    saved = json.loads(out.read_text())
    assert sorted(c["protocol"] for c in saved) == ["aiconfigurator-benchmark", "chunk-2048", "engine-defaults",
                                                   "search-default"]
    capsys.readouterr()
    assert main([*argv, "--from-json", str(out), "--protocol", "search-default"]) == 0  # every run read back, no replay
    assert "'search-default' protocol: max_num_batched_tokens 8192" in capsys.readouterr().out
    with pytest.raises(SystemExit) as refused:  # nothing to replay: --jobs would change nothing
        main([*argv, "--from-json", str(out), "--jobs", "2"])
    assert refused.value.code == 2 and "nothing is replayed" in capsys.readouterr().err


def test_a_calibration_scales_the_replay_s_step_times_through_the_mocker_s_speed_up_ratios():
    plain = check_row(row(QWEN_H100), protocol=SEARCH_DEFAULT)  # lockstep waves: TTFT is prefill steps alone
    scaled = check_row(
        row(QWEN_H100), StepScale(system="h100_sxm", backend="vllm", prefill=2.0, decode=0.5, fit_rows=1),
        SEARCH_DEFAULT,
    )
    # A closed loop's TTFT is its prefill waves: it doubles exactly. TPOT halves, less the prefill steps it waits on.
    assert scaled.replayed.ttft_ms == pytest.approx(2 * plain.replayed.ttft_ms, rel=0.05)
    assert 0.45 < scaled.replayed.tpot_ms / plain.replayed.tpot_ms < 0.7
    assert scaled.estimated.ttft_ms > plain.estimated.ttft_ms  # the static estimate is scaled alike


def test_the_protocol_chosen_per_group_is_the_one_of_least_error_on_the_fitting_half():
    from spica_lib.fidelity.check import Point, RowCheck
    from spica_lib.fidelity.protocol_study import protocol_choice_table
    from spica_lib.fidelity.silicon import SiliconRow

    base = row(QWEN_H100)
    ids = [f"row{i}" for i in range(40)]
    fitting = [i for i in ids if fits(SiliconRow(**{**base.model_dump(), "id": i}))][:3]
    held = [i for i in ids if not fits(SiliconRow(**{**base.model_dump(), "id": i}))][:2]

    def run(protocol, factor_fit, factor_held):
        checks = []
        for i in fitting + held:
            r = SiliconRow(**{**base.model_dump(), "id": i, "ttft_ms": 100.0})
            ttft = 100.0 * (factor_fit if i in fitting else factor_held)
            point = Point(ttft_ms=ttft, tpot_ms=r.tpot_ms, tokens_per_second_per_gpu=1.0)
            checks.append(RowCheck(row=r, measured=point.model_copy(update={"ttft_ms": 100.0}), replayed=point,
                                   protocol=protocol, ttft_after_opening_wave_ms=300.0))  # fmt: skip
        return checks

    # "b" is exact on the fitting half (a is 50 % off, and both are 200 % off without the opening wave).
    table = protocol_choice_table({"a": run("a", 1.5, 1.0), "b": run("b", 1.0, 1.1)})
    assert "| h100_sxm | vllm | Qwen/Qwen3-32B | b | 0 % (3 rows) | 10 % (2 rows) |" in table


def test_the_split_is_fixed_and_halves_the_rows():
    rows = aggregated_rows()
    share = sum(fits(r) for r in rows) / len(rows)
    assert 0.4 < share < 0.6 and [fits(r) for r in rows] == [fits(r) for r in aggregated_rows()]


def test_fit_writes_scales_a_config_can_opt_into_and_every_trial_records_them(tmp_path, capsys):
    path = tmp_path / "calibration.json"
    code = main(["fidelity", "--system", "h100_sxm", "--model", "Qwen/Qwen3-32B", "--limit", "10", "--fit", str(path)])
    printed = capsys.readouterr().out
    assert code == 0 and "Held-out rows" in printed and "| h100_sxm | vllm | Qwen/Qwen3-32B |" in printed
    assert "Held-out rows per concurrency band" in printed and "Held-out rows per isl band" in printed
    written = read_calibration(path)
    system_wide, scale = sorted(written.scales, key=lambda s: s.model is not None)  # fitted on one model: both
    assert (system_wide.system, system_wide.backend, system_wide.model) == ("h100_sxm", "vllm", None)
    assert scale.model == "Qwen/Qwen3-32B" and scale.fit_rows == system_wide.fit_rows >= 1
    assert written.scale_for("h100_sxm", "vllm", "Qwen/Qwen3-32B") == scale
    assert written.scale_for("h100_sxm", "vllm", "openai/gpt-oss-120b") == system_wide  # no rows of its own
    assert written.split == SPLIT and "silicon_sample.csv" in written.source
    # The protocol and the correction are chosen per group within the fitting half, among the documented set.
    assert {c.model for c in written.choices} == {None, "Qwen/Qwen3-32B"}
    assert all(c.protocol in [p.name for p in FIT_PROTOCOLS] for c in written.choices)
    assert written.protocol == written.choices[0].protocol or written.protocol == "per group: see choices"
    assert {c.correction for c in written.choices[0].candidates} >= {"none", "scale", "affine"}
    assert sum(b.rows for b in written.bands_for("h100_sxm", "vllm", "Qwen/Qwen3-32B")) == written.held_out[0].rows
    data = config_data(search_space={"hardware_sku": "h100_sxm", "backend": ["vllm"]})
    data["calibration"] = path.name  # relative to the config's folder
    config = build(data, base_dir=tmp_path)
    assert config.calibration.scales["vllm"].prefill == scale.prefill and config.calibration.source == written.source
    assert config.calibration.scales["vllm"].fitted_on == "Qwen/Qwen3-32B"
    selection = {"deployment_mode": "agg", "backend": "vllm", "router_mode": "round_robin",
                 "planner_scaling_policy": "disabled", "agg_max_num_batched_tokens": 8192, "agg_max_num_seqs": 256}  # fmt: skip
    spec = prepare_trial(config, selection, row(QWEN_H100).layout, backend_version="0.11.0")
    assert spec.sample["prefill_step_scale"] == scale.prefill and spec.sample["calibration"] == written.source
    engine = spec.replay.plan.agg_engine_args
    assert engine["speedup_ratio"] == pytest.approx(1 / scale.prefill)
    assert engine["decode_speedup_ratio"] == pytest.approx(scale.prefill / scale.decode)
    assert build(config.model_dump(mode="json")) == config  # the normalised config reads back without the file
    # A backend the file has no scales for, or no file at all, is refused before any compute.
    both = {**data, "search_space": {**data["search_space"], "backend": ["vllm", "sglang"]}}
    with pytest.raises(ConfigError, match=r"no scales for h100_sxm with backend\(s\) \['sglang'\]"):
        build(both, base_dir=tmp_path)
    with pytest.raises(ConfigError, match="calibration file 'missing.json' does not exist"):
        build({**data, "calibration": "missing.json"}, base_dir=tmp_path)


def test_the_shipped_calibration_loads_for_the_default_model_and_names_what_its_scales_were_fitted_on():
    from conftest import REPO

    data = config_data(search_space={"backend": ["vllm"]})
    data["calibration"] = str(REPO / "config" / "calibration" / "h100_h200_vllm.json")
    scale = build(data).calibration.scales["vllm"]
    assert scale.fitted_on == "every model"  # Qwen3-32B has no vLLM rows of its own on h200_sxm
    data["search_space"].update(model_name="openai/gpt-oss-120b")
    assert build(data).calibration.scales["vllm"].fitted_on == "openai/gpt-oss-120b"


def ranked_check(index, measured, replayed, estimated, ttft=100.0, tpot=20.0, estimated_tpot=20.0, aic=None):
    from spica_lib.fidelity.check import Point, RowCheck
    from spica_lib.fidelity.silicon import SiliconRow

    row = SiliconRow(id=f"row{index}", system="h100_sxm", backend="vllm", measured_version="0.11.2",
                     model="Qwen/Qwen3-32B", precision="", isl=1024, osl=128, concurrency=index, tp=1,
                     attention_dp=1, moe_tp=1, moe_ep=1, ttft_ms=ttft, tpot_ms=tpot)  # fmt: skip
    point = lambda value, tpot_ms=tpot: Point(ttft_ms=ttft, tpot_ms=tpot_ms, tokens_per_second_per_gpu=value)  # noqa: E731
    return RowCheck(row=row, measured=point(measured), replayed=point(replayed), estimated=point(estimated, estimated_tpot),
                    aiconfigurator=point(aic) if aic is not None else None)  # fmt: skip


def test_ranking_fidelity_on_a_hand_worked_group():
    from spica_lib.fidelity.ranking import ranking_groups, ranking_table

    measured = [100, 200, 300, 400, 500]
    replayed = [110, 190, 320, 380, 520]  # the same order: tau 1, its first is the measured best
    estimated = [100, 200, 300, 500, 400]  # one pair of ten swapped: tau (9 - 1) / 10; its first measured 400
    checks = [ranked_check(i + 1, m, r, e) for i, (m, r, e) in enumerate(zip(measured, replayed, estimated))]
    (group,) = ranking_groups(checks)
    assert group.rows == 5 and group.tau["replayed"] == pytest.approx(1.0) and group.regret_percent["replayed"] == 0
    assert group.tau["estimated"] == pytest.approx(0.8)
    assert group.regret_percent["estimated"] == pytest.approx(100 * (500 - 400) / 500)
    assert "median over groups (1)" in ranking_table([group])
    assert "aiconfigurator" not in group.tau  # it gave no estimate: no order of its own, and no column filled
    assert ranking_groups(checks[:4]) == []  # fewer than 5 rows: no group
    aic = [500, 400, 300, 200, 100]  # the reverse order: tau -1, its first measured 100
    checks = [ranked_check(i + 1, m, r, e, aic=a) for i, (m, r, e, a) in enumerate(zip(measured, replayed, estimated, aic))]
    (group,) = ranking_groups(checks)
    assert group.tau["aiconfigurator"] == pytest.approx(-1.0)
    assert group.regret_percent["aiconfigurator"] == pytest.approx(80.0)
    assert "aiconfigurator tau" in ranking_table([group])


def test_goodput_ranking_counts_a_row_over_the_sla_as_nothing():
    from spica_lib.fidelity.ranking import ranking_groups

    # Rows 4 and 5 measure over the TPOT bound (60 ms > 50 ms): the measured goodput best is row 3.
    checks = [ranked_check(i, 100.0 * i, 100.0 * i, 100.0 * i, tpot=20.0 if i <= 3 else 60.0) for i in range(1, 6)]
    (group,) = ranking_groups(checks)
    assert group.measured_within_sla == 3
    assert group.goodput_regret_percent["replayed"] == 0  # it saw the same TPOTs
    # An estimate that thinks every row meets the bound ranks row 5 first: it measured 0 goodput.
    checks = [ranked_check(i, 100.0 * i, 100.0 * i, 100.0 * i, tpot=20.0 if i <= 3 else 60.0, estimated_tpot=20.0)
              for i in range(1, 6)]  # fmt: skip
    (group,) = ranking_groups(checks)
    assert group.goodput_regret_percent["estimated"] == pytest.approx(100.0)
