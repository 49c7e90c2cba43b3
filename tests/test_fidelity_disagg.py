"""Disaggregated silicon rows: read right in each layout of the file, refused by reason, capped as documented,
and one SGLang disagg row replayed for real."""

import os

import pytest

from spica_lib.fidelity.cap import RowCap, capped
from spica_lib.fidelity.check import check_row, unsupported_reason
from spica_lib.fidelity.checkpoint import checkpoint_precision
from spica_lib.fidelity.protocol import DISAGG_PROTOCOL, disagg_settings
from spica_lib.fidelity.silicon import RoleShape, SiliconRow, UnreadRow, disagg_row, disaggregated_rows, silicon_csv

DB_DUMP = "dsr1_b200_sglang_fp8_disagg_1024x1024_c4_cfg455"
SOURCE_FILE = "2026_03_25_deepseek_r1_h200_sxm_sglang_fp8_disagg_1024x1024_c1024_tp8_0_ep8_0_882"
TWIN_SOURCE_FILE = "2026_03_25_deepseek_r1_gb300_sglang_fp8_disagg_8192x1024_c512_tp8_0_ep8_0_819"
TWIN_DB_DUMP = "dsr1_gb300_sglang_fp8_disagg_8192x1024_c512_cfg505"
NO_CONCURRENCY = "qwen3_32b_qwen3_32b_h100_sxm_sglang_disagg_4000x1000_c_tpnone_epnone_1"


def disagg(row_id):
    return next(r for r in disaggregated_rows() if r.id == row_id)


def test_a_db_dump_row_reads_workers_batches_and_the_concurrency_from_its_source():
    # silicon_data_source "db-dump/...; silicon_concurrency=4; ...", batch_size blank; roles written in full.
    row = disagg(DB_DUMP)
    assert isinstance(row, SiliconRow) and row.mode == "disagg"
    assert (row.system, row.backend, row.model, row.precision, row.measured_version) == (
        "b200_sxm", "sglang", "deepseek-ai/DeepSeek-V3", "fp8", "0.5.8.post1")  # fmt: skip
    assert (row.isl, row.osl, row.concurrency) == (1024, 1024, 4)
    assert row.prefill == RoleShape(workers=1, tp=8, attention_dp=1, moe_tp=1, moe_ep=8, batch_size=1)
    assert row.decode == RoleShape(workers=1, tp=8, attention_dp=1, moe_tp=1, moe_ep=8, batch_size=4)
    assert row.gpus == 16 and row.layout.label() == "P 1xtp8ep8 + D 1xtp8ep8"
    assert row.ttft_ms == pytest.approx(214.33846288127825) and row.tpot_ms == pytest.approx(9.803760119498524)
    assert row.tokens_per_second_per_gpu == pytest.approx(4 * 1024 * 1000 / (214.33846288 + 1023 * 9.80376012) / 16)


def raw_line(row_id):
    import csv

    with open(silicon_csv(), newline="", encoding="utf-8") as handle:
        return next(raw for raw in csv.DictReader(handle) if raw["id"] == row_id)


def test_a_source_file_row_parses_but_is_not_read_its_workers_are_blank():
    # "source_file=2026-03-25.csv; model=DeepSeek-R1; silicon_concurrency=1024; ...", worker counts blank.
    parsed = disagg_row(raw_line(SOURCE_FILE))
    assert parsed.concurrency == 1024 and (parsed.isl, parsed.osl) == (1024, 1024)
    assert parsed.prefill == RoleShape(tp=8, moe_ep=8) and parsed.decode == RoleShape(tp=8, moe_ep=8)
    assert (parsed.ttft_ms, parsed.tpot_ms) == pytest.approx((9988.050905488377, 26.7059204761406))
    read = disagg(SOURCE_FILE)
    assert isinstance(read, UnreadRow) and read.reason.startswith("worker counts blank (source_file layout)")


def test_a_source_file_row_with_a_db_dump_twin_is_read_from_the_twin_which_shows_what_ran():
    # The same measurement (8192/1024, 512 in flight, TTFT 2689 ms) in both layouts: the source_file line says
    # P tp8 ep8 + D tp32, the db-dump line P 5 x (dp8 ep8) + D dp32 ep32, 72 GPUs.
    source, dump = disagg_row(raw_line(TWIN_SOURCE_FILE)), disagg(TWIN_DB_DUMP)
    assert (source.ttft_ms, source.tpot_ms) == (dump.ttft_ms, dump.tpot_ms)
    assert source.layout.label() == "P 1xtp8ep8 + D 1xtp32moetp4ep8"
    assert dump.layout.label() == "P 5xtp1dp8ep8 + D 1xtp1dp32ep32" and dump.gpus == 72
    assert disagg(TWIN_SOURCE_FILE).reason.startswith("a repeat of another row's measurement")


def test_a_row_without_a_recorded_concurrency_is_not_read_and_says_why():
    row = disagg(NO_CONCURRENCY)
    assert isinstance(row, UnreadRow)
    assert row.reason.startswith("concurrency not recorded") and (row.system, row.backend) == ("h100_sxm", "sglang")


def test_the_file_holds_every_disagg_row_and_the_refusals_are_by_reason():
    rows = disaggregated_rows()
    assert len(rows) == 1602
    read = [r for r in rows if isinstance(r, SiliconRow)]
    reasons = [r.reason if isinstance(r, UnreadRow) else unsupported_reason(r) for r in rows]
    assert sum(1 for r in read if r.backend == "trtllm") == reasons.count(
        "TRT-LLM disaggregated: no replay protocol for TRT-LLM disagg engines is written down")  # fmt: skip
    precision = [x for x in reasons if x and x.startswith("measured in fp4")]
    assert len(precision) >= 25  # the fp4 rows of fp8 (DeepSeek) and int4 (Kimi-K2.5) checkpoints
    assert any(x and x.startswith("attention DP in the prefill role") for x in reasons)
    assert sum(1 for x in reasons if x and x.startswith("a repeat of another row")) > 100  # campaigns dumped twice
    assert sum(1 for x in reasons if x and x.startswith("worker counts blank")) > 500
    assert sum(1 for x in reasons if x is None) >= 10


def test_precision_must_match_exactly_not_just_be_quantised():
    assert checkpoint_precision("deepseek-ai/DeepSeek-R1") == "fp8"
    assert checkpoint_precision("moonshotai/Kimi-K2.5") == "int4"  # compressed-tensors, 4-bit int weights
    assert checkpoint_precision("openai/gpt-oss-120b") == "fp4"  # mxfp4
    assert checkpoint_precision("Qwen/Qwen3-32B") == ""
    kimi = disagg("kimik2_5_gb200_vllm_fp4_disagg_1024x1024_c256_cfg697")
    assert unsupported_reason(kimi) == (
        "measured in fp4, but the replay runs moonshotai/Kimi-K2.5 in int4 (its checkpoint's quantisation)")  # fmt: skip
    fp4 = next(r for r in disaggregated_rows() if isinstance(r, SiliconRow) and r.backend == "sglang"
               and r.precision == "fp4" and r.prefill.attention_dp == r.decode.attention_dp == 1)  # fmt: skip
    assert unsupported_reason(fp4) == (
        f"measured in fp4, but the replay runs {fp4.model} in fp8 (its checkpoint's quantisation)")  # fmt: skip
    assert unsupported_reason(disagg(DB_DUMP)) is None


def test_a_repeated_measurement_is_read_once():
    rows = [r for r in disaggregated_rows() if isinstance(r, SiliconRow)]
    measurements = [r.model_dump_json(exclude={"id"}) for r in rows]
    assert len(set(measurements)) == len(measurements)
    # The same gb300 measurement (8192/1024, 512 in flight) is on three lines: two dumps of the source_file layout
    # and one db-dump line; only the db-dump one is read.
    ids = [r.id for r in rows if r.system == "gb300" and r.isl == 8192 and r.concurrency == 512
           and r.ttft_ms == pytest.approx(2689, abs=1)]  # fmt: skip
    assert ids == [TWIN_DB_DUMP]


def test_trtllm_and_attention_dp_rows_are_refused_by_name():
    trtllm = disagg("kimik2_5_gb200_trtllm_fp4_disagg_1024x1024_c4_cfg759")
    assert unsupported_reason(trtllm).startswith("TRT-LLM disaggregated")
    dp = disagg("dsr1_gb200_sglang_fp4_disagg_1024x1024_c8192_cfg483")  # prefill 4 x (tp1 dp4 ep4)
    assert unsupported_reason(dp) == (
        "attention DP in the prefill role: Dynamo's offline disagg replay takes none (dp_size 1 in both roles)")  # fmt: skip


def _row(index, concurrency, isl=1024):
    role = RoleShape(tp=8, moe_ep=8)
    return SiliconRow(id=f"r{index}", system="h200_sxm", backend="sglang", measured_version="0.5.8",
                      model="deepseek-ai/DeepSeek-R1", precision="fp8", isl=isl, osl=1024, concurrency=concurrency,
                      ttft_ms=100.0, tpot_ms=10.0, mode="disagg", prefill=role, decode=role)  # fmt: skip


def test_the_cap_keeps_both_ends_and_evenly_between_and_names_what_it_leaves_out():
    rows = [_row(i, c) for i, c in enumerate([1, 2, 4, 8, 16, 32, 64, 128, 256, 4096])] + [_row(99, 8, isl=8192)]
    kept, left = capped(rows, RowCap(rows_per_group=4, max_concurrency=1024))
    assert [r.concurrency for r in kept if r.isl == 1024] == [1, 8, 32, 256]  # indices 0, 3, 5, 8 of 9
    assert any(r.id == "r99" for r in kept)  # another group, under the cap
    assert left["r9"] == "over the replay cap: concurrency above 1024"
    assert left["r1"] == "over the replay cap: more than 4 rows in its group"
    assert len(kept) + len(left) == len(rows)


def test_the_disagg_protocol_takes_the_rows_batches_where_recorded_else_the_loops_share():
    recorded = disagg(DB_DUMP)
    assert disagg_settings(recorded) == {"prefill_max_num_batched_tokens": 8192, "prefill_max_num_seqs": 1,
                                         "decode_max_num_batched_tokens": 8192, "decode_max_num_seqs": 4}  # fmt: skip
    blank = disagg_row(raw_line(SOURCE_FILE))  # no batch sizes: as many 1k prompts as 8192 tokens hold; the loop per decoder
    assert disagg_settings(blank) == {"prefill_max_num_batched_tokens": 8192, "prefill_max_num_seqs": 8,
                                      "decode_max_num_batched_tokens": 8192, "decode_max_num_seqs": 1024}  # fmt: skip


def test_one_sglang_disagg_row_is_replayed_for_real():
    os.environ.setdefault("DYN_LOG", "error")
    row = disagg(DB_DUMP)  # P 1 x tp8 ep8 + D 1 x tp8 ep8 on B200, 4 in flight, 1k/1k
    check = check_row(row)
    assert check.skipped is None and check.protocol == DISAGG_PROTOCOL
    assert check.engine == {"prefill_max_num_batched_tokens": 8192, "prefill_max_num_seqs": 1,
                            "decode_max_num_batched_tokens": 8192, "decode_max_num_seqs": 4}  # fmt: skip
    replayed, estimated = check.replayed, check.estimated
    assert replayed.ttft_ms > 0 and replayed.tokens_per_second_per_gpu > 0
    # Four requests in flight never queue at the decoder: every decode step is the perf DB's step at batch <= 4,
    # which the static estimate reads from the same DB at the same shape.
    assert replayed.tpot_ms == pytest.approx(estimated.tpot_ms, rel=0.05)
    assert check.aiconfigurator is not None and check.aiconfigurator.tpot_ms == pytest.approx(estimated.tpot_ms, rel=0.05)


def test_spica_fidelity_mode_disagg_prints_the_table_and_the_refusals(capsys):
    os.environ.setdefault("DYN_LOG", "error")
    from spica_lib.cli.main import main

    args = ["fidelity", "--mode", "disagg", "--system", "b200_sxm", "--backend", "sglang", "--model", "deepseek-ai/DeepSeek-V3"]
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert "Disagg rows replayed by the 'disagg-measured' protocol" in printed
    assert "| b200_sxm | sglang | deepseek-ai/DeepSeek-V3 | 8192/1024 | 4 (" in printed  # the four db-dump rows at 8k
    assert "skipped" in printed and "measured in fp4, but the replay runs deepseek-ai/DeepSeek-V3 in fp8" in printed
    with pytest.raises(SystemExit, match="--compare-protocols compares the agg replay protocols"):
        main([*args, "--compare-protocols"])
