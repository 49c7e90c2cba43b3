"""`spica fidelity --rows`: your own measurements read from a CSV (documented or silicon_sample.csv layout) or
from AIPerf exports with a deployment description; errors name the field; the rows replayed end to end."""

import csv
import json

import pytest

from spica_lib.cli.main import main
from spica_lib.fidelity.silicon import RoleShape, aggregated_rows, silicon_csv
from spica_lib.fidelity.user_rows import AIPERF_SCHEMA, RowsError, read_rows

QWEN_H100 = "qwen_qwen3_32b_qwen_qwen3_32b_h100_sxm_vllm_agg_1024x128_c8_tp2_epnone_1"
HEADER = "system,backend,backend_version,model,mode,isl,osl,concurrency,ttft_ms,tpot_ms,tp"


def write(path, text):
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_the_documented_csv_reads_agg_and_disagg_rows(tmp_path):
    path = write(tmp_path / "mine.csv", (
        "id,system,backend,backend_version,model,precision,mode,isl,osl,concurrency,ttft_ms,tpot_ms,tp,"
        "prefill_workers,prefill_tp,prefill_moe_ep,decode_workers,decode_tp,decode_moe_ep,decode_batch_size\n"
        "a,h100_sxm,vllm,0.12.0,Qwen/Qwen3-32B,,agg,1024,128,8,150.5,18.25,2,,,,,,,\n"
        "d,b200_sxm,sglang,0.5.8,deepseek-ai/DeepSeek-V3,fp8,disagg,1024,1024,4,214.3,9.8,,1,8,8,2,8,8,4\n"
    ))  # fmt: skip
    (agg, dis), unread = read_rows(path)
    assert unread == []
    assert (agg.id, agg.system, agg.backend, agg.measured_version, agg.precision) == ("a", "h100_sxm", "vllm", "0.12.0", "")
    assert (agg.mode, agg.tp, agg.gpus, agg.concurrency, agg.ttft_ms, agg.tpot_ms) == ("agg", 2, 2, 8, 150.5, 18.25)
    assert dis.mode == "disagg" and dis.prefill == RoleShape(workers=1, tp=8, moe_ep=8)
    assert dis.decode == RoleShape(workers=2, tp=8, moe_ep=8, batch_size=4) and dis.gpus == 24


@pytest.mark.parametrize(
    ("header", "line", "message"),
    [
        (HEADER + ",colour", "h100_sxm,vllm,0.12.0,Qwen/Qwen3-32B,agg,1024,128,8,150,18,2,red", "unknown column 'colour'"),
        (HEADER, "h100_sxm,vllm,0.12.0,Qwen/Qwen3-32B,agg,1024,128,8,150,18,0", "line 2: tp: Input should be greater than or equal to 1 (got '0')"),
        (HEADER, "h100_sxm,tensorrt,0.12.0,Qwen/Qwen3-32B,agg,1024,128,8,150,18,2", "line 2: backend: Input should be 'vllm', 'sglang' or 'trtllm'"),
        (HEADER.replace(",concurrency", ""), "h100_sxm,vllm,0.12.0,Qwen/Qwen3-32B,agg,1024,128,150,18,2", "line 2: concurrency: required, and missing"),
        (HEADER, "h100_sxm,sglang,0.5.8,deepseek-ai/DeepSeek-V3,disagg,1024,1024,4,214,9.8,", "prefill_workers: a disagg row must say how many prefill workers"),
        (HEADER + ",request_rate", "h100_sxm,vllm,0.12.0,Qwen/Qwen3-32B,agg,1024,128,8,150,18,2,4.0", "column 'request_rate': an open-loop row is not replayed yet"),
    ],
)  # fmt: skip
def test_a_documented_csv_row_in_error_names_its_line_and_field(tmp_path, header, line, message):
    with pytest.raises(RowsError, match=message.replace("(", r"\(").replace(")", r"\)")):
        read_rows(write(tmp_path / "bad.csv", f"{header}\n{line}\n"))


def shipped_lines(*ids):
    with open(silicon_csv(), newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        return reader.fieldnames, [raw for raw in reader if raw["id"] in ids]


def test_a_file_in_silicon_sample_layout_is_accepted_as_it_is(tmp_path):
    header, lines = shipped_lines(QWEN_H100, "dsr1_b200_sglang_fp8_disagg_1024x1024_c4_cfg455")
    path = tmp_path / "silicon.csv"
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, header)
        writer.writeheader()
        writer.writerows(lines)
    rows, unread = read_rows(str(path))
    assert unread == [] and {r.id for r in rows} == {QWEN_H100, "dsr1_b200_sglang_fp8_disagg_1024x1024_c4_cfg455"}
    agg = next(r for r in rows if r.mode == "agg")
    assert agg == next(r for r in aggregated_rows() if r.id == QWEN_H100)
    line = next(i for i, raw in enumerate(lines) if raw["mode"] == "disagg")
    lines[line]["prefill_num_workers"] = ""  # a disagg line of yours must say how many workers it measured
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, header)
        writer.writeheader()
        writer.writerows(lines)
    with pytest.raises(RowsError, match=f"line {line + 2}: prefill_num_workers is blank"):
        read_rows(str(path))


def aiperf_export(ttft=150.0, itl=18.0, concurrency=8, ttft_unit="ms", drop=None):
    """An export in the AIPerf 0.13.0 profile_export_aiperf.json layout (the fields the reader takes, and others)."""
    data = {
        "request_throughput": {"unit": "requests/sec", "avg": 3.1},
        "time_to_first_token": {"unit": ttft_unit, "avg": ttft, "p50": ttft * 0.9, "p90": ttft * 1.4},
        "inter_token_latency": {"unit": "ms", "avg": itl, "p90": itl * 1.1},
        "input_sequence_length": {"unit": "tokens", "avg": 1024.0, "p50": 1024.0},
        "output_sequence_length": {"unit": "tokens", "avg": 127.6, "p50": 128.0},
        "request_count": {"unit": "requests", "avg": 64.0},
        "was_cancelled": False,
        "error_summary": [],
        "input_config": {
            "endpoint": {"model_names": ["Qwen/Qwen3-32B"], "type": "chat", "streaming": True},
            "loadgen": {"concurrency": concurrency, "request_count": 64},
        },
    }
    if drop:
        data.pop(drop)
    return data


DEPLOYMENT = "system: h100_sxm\nbackend: vllm\nbackend_version: 0.12.0\nmode: agg\ntp: 2\n"


def test_an_aiperf_export_with_its_deployment_reads_as_a_row(tmp_path):
    export = tmp_path / "tp2_c8.json"
    export.write_text(json.dumps(aiperf_export()), encoding="utf-8")
    (row,), _ = read_rows(str(export), write(tmp_path / "deployment.yaml", DEPLOYMENT))
    assert (row.id, row.system, row.backend, row.model, row.mode, row.tp) == ("tp2_c8", "h100_sxm", "vllm", "Qwen/Qwen3-32B", "agg", 2)
    assert (row.isl, row.osl, row.concurrency, row.ttft_ms, row.tpot_ms) == (1024, 128, 8, 150.0, 18.0)
    assert (row.ttft_p90_ms, row.tpot_p90_ms) == pytest.approx((210.0, 19.8))  # the tails, beside the means
    runs = write(tmp_path / "runs.yaml", "runs:\n  - export: tp2_c8.json\n    deployment:\n" + "".join(
        f"      {line}\n" for line in DEPLOYMENT.splitlines()))  # fmt: skip
    assert read_rows(runs)[0] == [row]


@pytest.mark.parametrize(
    ("export", "deployment", "message"),
    [
        (aiperf_export(ttft_unit="s"), DEPLOYMENT, "time_to_first_token.unit is 's' .*; allowed: 'ms'"),
        (aiperf_export(drop="inter_token_latency"), DEPLOYMENT, f"inter_token_latency missing from .* \\(the {AIPERF_SCHEMA} layout\\)"),
        (aiperf_export(concurrency=None), DEPLOYMENT, "input_config.loadgen.concurrency is None .*a request-rate run is not replayed"),
        (aiperf_export(), DEPLOYMENT.replace("mode: agg", "mode: disagg"), "mode disagg: give prefill: and decode:"),
        (aiperf_export(), DEPLOYMENT + "gpus: 2\n", "gpus: not a field; allowed: system, backend"),
    ],
)  # fmt: skip
def test_an_aiperf_export_or_deployment_in_error_names_the_field(tmp_path, export, deployment, message):
    path = tmp_path / "run.json"
    path.write_text(json.dumps(export), encoding="utf-8")
    with pytest.raises(RowsError, match=message):
        read_rows(str(path), write(tmp_path / "deployment.yaml", deployment))


def test_an_export_without_its_deployment_is_refused(tmp_path):
    path = tmp_path / "run.json"
    path.write_text(json.dumps(aiperf_export()), encoding="utf-8")
    with pytest.raises(RowsError, match="needs --deployment FILE"):
        read_rows(str(path))


def test_rows_end_to_end_replays_your_file_and_refuses_a_row_it_cannot_replay(tmp_path, capsys):
    qwen = next(r for r in aggregated_rows() if r.id == QWEN_H100)
    lines = [f"h100_sxm,vllm,0.12.0,Qwen/Qwen3-32B,agg,1024,128,{c},{qwen.ttft_ms},{qwen.tpot_ms},{tp}"
             for c, tp in ((8, 2), (16, 2))]  # fmt: skip
    path = write(tmp_path / "mine.csv", HEADER + "\n" + "\n".join(lines) + "\n")
    out = tmp_path / "checks.json"
    assert main(["fidelity", "--rows", path, "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "| h100_sxm | vllm | Qwen/Qwen3-32B | 2 (0) |" in printed
    checks = json.loads(out.read_text())
    assert [c["row"]["id"] for c in checks] == ["mine:2", "mine:3"] and all(c["replayed"] for c in checks)
    assert checks[0]["row"]["measured_version"] == "0.12.0" and checks[0]["protocol"] == "aiconfigurator-benchmark"
    fp8 = write(tmp_path / "fp8.csv", HEADER + ",precision\n" + lines[0] + ",fp8\n")
    assert main(["fidelity", "--rows", fp8]) == 2
    assert "row fp8:2: precision: measured in fp8, but the replay runs Qwen/Qwen3-32B in its own dtype" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # --rows replays every row of the file: a filter would do nothing
        main(["fidelity", "--rows", path, "--system", "h100_sxm"])


def test_an_aiperf_export_of_a_disagg_deployment_reads_each_role(tmp_path):
    export = tmp_path / "profile_export_aiperf.json"  # AIPerf's own file name: the row is named by its folder
    export.write_text(json.dumps(aiperf_export(ttft=214.3, itl=9.8, concurrency=4)), encoding="utf-8")
    deployment = write(tmp_path / "dep.yaml", (
        "system: b200_sxm\nbackend: sglang\nbackend_version: 0.5.8\nmodel: deepseek-ai/DeepSeek-V3\nprecision: fp8\n"
        "mode: disagg\nprefill: {workers: 1, tp: 8, moe_ep: 8}\ndecode: {workers: 2, tp: 8, moe_ep: 8, batch_size: 4}\n"
    ))  # fmt: skip
    (row,), _ = read_rows(str(export), deployment)
    assert row.id == tmp_path.name and row.mode == "disagg" and row.gpus == 24 and row.concurrency == 4
    assert row.prefill == RoleShape(workers=1, tp=8, moe_ep=8) and row.decode == RoleShape(workers=2, tp=8, moe_ep=8, batch_size=4)
    assert (row.model, row.precision, row.ttft_ms, row.tpot_ms) == ("deepseek-ai/DeepSeek-V3", "fp8", 214.3, 9.8)


def test_percentiles_are_judged_beside_the_means_where_rows_measured_them():
    from spica_lib.fidelity.check import Point, RowCheck
    from spica_lib.fidelity.tables import percentile_table
    from spica_lib.fidelity.silicon import SiliconRow

    row = SiliconRow(id="a", system="h100_sxm", backend="vllm", measured_version="0.12.0", model="Qwen/Qwen3-32B",
                     precision="", isl=1024, osl=128, concurrency=8, tp=2, ttft_ms=100.0, tpot_ms=20.0,
                     ttft_p90_ms=200.0, tpot_p90_ms=25.0)  # fmt: skip
    measured = Point(ttft_ms=100.0, tpot_ms=20.0, tokens_per_second_per_gpu=1.0, ttft_p90_ms=200.0, tpot_p90_ms=25.0)
    replayed = Point(ttft_ms=100.0, tpot_ms=20.0, tokens_per_second_per_gpu=1.0, ttft_p90_ms=120.0, tpot_p90_ms=25.0)
    table = percentile_table([RowCheck(row=row, measured=measured, replayed=replayed)])
    assert "| h100_sxm | vllm | Qwen/Qwen3-32B | 1 | 0 % (+0 %) | 40 % (-40 %) | 0 % (+0 %) | 0 % (+0 %) |" in table
    bare = RowCheck(row=row, measured=measured.model_copy(update={"ttft_p90_ms": None}), replayed=replayed)
    assert percentile_table([bare]) is None  # no measured p90: no table
