"""`spica fidelity --rows FILE --fit cal.yaml`: scales fitted on your rows recover the true ones, the held-out
half is judged with and without them and its error is written next to them, and a config that opts into
the file carries the scales and the held-out error into the run's summary and report."""

import os

import pytest
import yaml
from conftest import build, config_data

from spica_lib.cli.main import main
from spica_lib.facts.calibration import read_calibration
from spica_lib.fidelity.check import check_row
from spica_lib.fidelity.choice import MIN_DECODE_ROWS
from spica_lib.fidelity.fit import fits
from spica_lib.fidelity.silicon import SiliconRow

PREFILL, DECODE = 1.3, 0.8  # the true step-time scales the constructed measurements carry


def constructed_rows():
    """Qwen3-32B on H100 as the replay times it, at several loops: ids chosen so each half has rows. The fitting half
    has MIN_DECODE_ROWS rows: a decode scale is kept only where that many fitting rows support it (fidelity/choice.py),
    and without one a prefill scale alone would make tokens/s/GPU worse, so fewer rows would keep no correction."""
    ids = [f"r{i}" for i in range(40)]
    fitting = [i for i in ids if fits(SiliconRow(id=i, **BASE))][:MIN_DECODE_ROWS]
    held = [i for i in ids if not fits(SiliconRow(id=i, **BASE))][:3]
    loops = (1, 2, 4, 8, 16, 2, 4, 8)
    return [SiliconRow(**{**BASE, "id": i, "concurrency": c}) for i, c in zip(fitting + held, loops, strict=True)]


BASE = dict(system="h100_sxm", backend="vllm", measured_version="0.12.0", model="Qwen/Qwen3-32B", precision="",
            isl=1024, osl=128, concurrency=4, tp=2, ttft_ms=1.0, tpot_ms=1.0)  # fmt: skip


def test_a_fit_on_rows_with_known_scales_recovers_them_and_the_held_out_error_drops(tmp_path, capsys):
    os.environ.setdefault("DYN_LOG", "error")
    lines = ["id,system,backend,backend_version,model,mode,isl,osl,concurrency,ttft_ms,tpot_ms,tp"]
    for row in constructed_rows():
        replayed = check_row(row).replayed  # what the replay says; the "measurement" is it under the true scales
        lines.append(f"{row.id},h100_sxm,vllm,0.12.0,Qwen/Qwen3-32B,agg,1024,128,{row.concurrency},"
                     f"{replayed.ttft_ms * PREFILL},{replayed.tpot_ms * DECODE},2")  # fmt: skip
    rows = tmp_path / "mine.csv"
    rows.write_text("\n".join(lines) + "\n", encoding="utf-8")
    cal = tmp_path / "cal.yaml"
    assert main(["fidelity", "--rows", str(rows), "--ranking", "--fit", str(cal)]) == 0
    printed = capsys.readouterr().out
    assert "Held-out rows" in printed and "Ranking of the held-out rows, uncalibrated" in printed
    written = read_calibration(cal)
    assert yaml.safe_load(cal.read_text())["source"] == f"your rows: {rows}"  # written as YAML, by its name
    scale = written.scale_for("h100_sxm", "vllm", "Qwen/Qwen3-32B")
    assert scale.model == "Qwen/Qwen3-32B" and scale.modes == ["agg"] and scale.fit_rows == MIN_DECODE_ROWS
    assert scale.prefill == pytest.approx(PREFILL, rel=0.03) and scale.decode == pytest.approx(DECODE, rel=0.03)
    (error,) = written.held_out
    assert (error.system, error.backend, error.model, error.rows) == ("h100_sxm", "vllm", "Qwen/Qwen3-32B", 3)
    # Uncalibrated, the replay is off by the true scales (TPOT: |1 - 0.8| / 0.8 = 25 %). Calibrated, by what scaling
    # the step times does not carry over exactly: in an agg engine a decode step shares time with chunked prefills,
    # which the prefill scale slows (a few percent here).
    assert error.uncalibrated["tpot_ms"] == pytest.approx(100 * (1 / DECODE - 1), rel=0.05)
    assert error.uncalibrated["ttft_ms"] == pytest.approx(100 * (1 - 1 / PREFILL), rel=0.1)
    for metric in ("ttft_ms", "tpot_ms"):
        assert error.calibrated[metric] < error.uncalibrated[metric] / 3

    # `spica run` with `calibration: cal.yaml`: the config carries the scales and the held-out error, and
    # `spica validate` (the run's summary) names both.
    data = config_data(search_space={"hardware_sku": "h100_sxm", "backend": ["vllm"]})
    data["calibration"] = cal.name
    config = build(data, base_dir=tmp_path)
    held = config.calibration.scales["vllm"].held_out
    assert held.rows == 3 and held.tpot_mape == pytest.approx(error.calibrated["tpot_ms"])
    assert held.step_error == pytest.approx(max(error.calibrated["ttft_ms"], error.calibrated["tpot_ms"]) / 100)
    config_file = tmp_path / "c.yaml"
    config_file.write_text(yaml.safe_dump(data), encoding="utf-8")
    assert main(["validate", str(config_file)]) == 0
    summary = capsys.readouterr().out
    assert "calibrated vllm: prefill x1.3" in summary and "held-out error on 3 rows" in summary


def calibration_file(tmp_path, rows, ttft=(40.0, 8.0), tpot=(30.0, 6.0), bands=()):
    from spica_lib.base.versions import package_versions
    from spica_lib.facts.calibration import BandError, CalibrationFile, HeldOutError, StepScale, write_calibration

    scale = StepScale(system="h100_sxm", backend="vllm", model="Qwen/Qwen3-32B", prefill=1.2, decode=0.9, fit_rows=6,
                      modes=["agg"])  # fmt: skip
    error = HeldOutError(system="h100_sxm", backend="vllm", model="Qwen/Qwen3-32B", rows=rows,
                         uncalibrated={"ttft_ms": ttft[0], "tpot_ms": tpot[0], "tokens_per_second_per_gpu": 20.0},
                         calibrated={"ttft_ms": ttft[1], "tpot_ms": tpot[1], "tokens_per_second_per_gpu": 5.0})  # fmt: skip
    path = tmp_path / "cal.yaml"
    held = [BandError(system="h100_sxm", backend="vllm", model="Qwen/Qwen3-32B", kind="concurrency", low=low, high=high,
                      rows=2, uncalibrated={"ttft_ms": 50.0 + low, "tpot_ms": 30.0},
                      calibrated={"ttft_ms": 10.0 + low, "tpot_ms": 5.0}) for low, high in bands]  # fmt: skip
    write_calibration(path, CalibrationFile(source="your rows: mine.csv", split="test", scales=[scale],
                                            held_out=[error], versions=package_versions(), bands=held))  # fmt: skip
    return path


def test_the_stress_band_is_the_calibrations_measured_held_out_step_error_and_says_so(tmp_path):
    data = config_data(search_space={"hardware_sku": "h100_sxm", "backend": ["vllm"]})
    data["calibration"] = calibration_file(tmp_path, rows=6).name
    sweep = build(data, base_dir=tmp_path).sweep
    assert sweep.stress_band == pytest.approx(0.08)  # the larger of TTFT 8 % and TPOT 6 % held out, calibrated
    assert sweep.stress_band_source.startswith("the calibration's measured held-out step-time error: prefill (TTFT) 8 %")
    assert "6 held-out vllm rows" in sweep.stress_band_source
    assert sweep.stress_band_roles == pytest.approx({"prefill": 0.08, "decode": 0.06})  # one band per role
    # Too few held-out rows to measure a band: the default, and the source says why.
    data["calibration"] = calibration_file(tmp_path, rows=3).name
    sweep = build(data, base_dir=tmp_path).sweep
    assert sweep.stress_band == 0.15
    assert sweep.stress_band_source == "the default 15 % (3 held-out vllm rows, fewer than the 5 a measured band needs)"
    # Given, it stays; without a calibration, the default says so.
    data["sweep"] = {"stress_band": 0.3}
    assert build(data, base_dir=tmp_path).sweep.stress_band_source == "sweep.stress_band, as given"
    plain = config_data()
    assert build(plain).sweep.stress_band_source == "the default 15 % (no calibration)"


def test_a_disagg_fit_recovers_each_roles_scale_from_its_own_signal(tmp_path, capsys):
    """Disagg rows (DeepSeek-V3 on B200, P 1 x tp8 ep8 + D 1 x tp8 ep8): the prefill scale is fitted on TTFT,
    the decode scale on TPOT, and a decode worker's steps hold no prefill, so TPOT scales exactly."""
    os.environ.setdefault("DYN_LOG", "error")
    role = dict(workers=1, tp=8, moe_ep=8)
    base = dict(system="b200_sxm", backend="sglang", measured_version="0.5.8", model="deepseek-ai/DeepSeek-V3",
                precision="fp8", isl=1024, osl=256, ttft_ms=1.0, tpot_ms=1.0, mode="disagg")  # fmt: skip
    ids = [f"d{i}" for i in range(40)]
    probe = lambda i: SiliconRow(id=i, concurrency=4, prefill=role, decode=role, **base)  # noqa: E731
    # MIN_DECODE_ROWS fitting rows: fewer could not support the decode scale (fidelity/choice.py), and the prefill
    # scale alone would make tokens/s/GPU worse, so no correction would be kept.
    chosen = [i for i in ids if fits(probe(i))][:MIN_DECODE_ROWS] + [i for i in ids if not fits(probe(i))][:2]
    head = ("id,system,backend,backend_version,model,precision,mode,isl,osl,concurrency,ttft_ms,tpot_ms,"
            "prefill_workers,prefill_tp,prefill_moe_ep,decode_workers,decode_tp,decode_moe_ep")  # fmt: skip
    lines = [head]
    for i, c in zip(chosen, (1, 2, 3, 4, 6, 2, 4), strict=True):
        replayed = check_row(SiliconRow(id=i, concurrency=c, prefill=role, decode=role, **base)).replayed
        lines.append(f"{i},b200_sxm,sglang,0.5.8,deepseek-ai/DeepSeek-V3,fp8,disagg,1024,256,{c},"
                     f"{replayed.ttft_ms * PREFILL},{replayed.tpot_ms * DECODE},1,8,8,1,8,8")  # fmt: skip
    rows = tmp_path / "disagg.csv"
    rows.write_text("\n".join(lines) + "\n", encoding="utf-8")
    cal = tmp_path / "cal.yaml"
    assert main(["fidelity", "--rows", str(rows), "--fit", str(cal)]) == 0
    assert "Disagg rows replayed by the 'disagg-measured' protocol" in capsys.readouterr().out
    written = read_calibration(cal)
    scale = written.scale_for("b200_sxm", "sglang", "deepseek-ai/DeepSeek-V3")
    assert scale.modes == ["disagg"] and scale.fit_rows == MIN_DECODE_ROWS
    assert scale.prefill == pytest.approx(PREFILL, rel=0.05) and scale.decode == pytest.approx(DECODE, rel=0.02)
    (error,) = written.held_out
    assert error.rows == 2 and error.calibrated["tpot_ms"] < 2 and error.calibrated["ttft_ms"] < error.uncalibrated["ttft_ms"] / 3


def test_spica_run_with_a_calibration_names_it_its_held_out_error_and_the_bands_source(tmp_path):
    import subprocess
    import sys

    from conftest import REPO, write_yaml

    from spica_lib.config.narrow import narrowed

    data = yaml.safe_load((REPO / "config" / "default.yaml").read_text())
    data["search_space"] = narrowed({**data["search_space"], "hardware_sku": "h100_sxm", "backend": ["vllm"]},
                                    deployment_mode=["agg"], router_mode=["round_robin"],
                                    planner_scaling_policy=["disabled"])  # fmt: skip
    data["sweep"].update(max_rounds=1, candidates_per_round=3, stress_top=2)
    data["calibration"] = calibration_file(tmp_path, rows=6, bands=[(1, 8), (9, 32), (33, None)]).name
    path = write_yaml(tmp_path, data)
    done = subprocess.run([sys.executable, "-m", "spica_lib.cli", "run", str(path)], cwd=tmp_path,
                          capture_output=True, text=True, check=False, timeout=900)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    report = next((tmp_path / "results").iterdir()) / "report" / "report.md"
    text = report.read_text()
    assert "- **Calibration**: `cal.yaml` (your rows: mine.csv): vllm: prefill x1.2, decode x0.9" in text
    assert "held-out error on 6 rows: TTFT 40 % -> 8 %, TPOT 30 % -> 6 % (MAPE)" in text
    assert "8 % slower or faster than simulated" in text
    assert "The band: the calibration's measured held-out step-time error: prefill (TTFT) 8 % MAPE on 6" in text
    # The winner's load, from its own replay, and the calibration's held-out error in the band that holds it.
    from spica_lib.fidelity.bands import LOAD_BANDS, band_label, band_of
    from spica_lib.report.load_band import engine_load
    from spica_lib.run.view import RunView

    view = RunView(report.parents[1])
    load = engine_load(view.records[view.ranked[0].key])
    low, high = band_of(max(1, int(load)), LOAD_BANDS)
    assert f"It ran at {load:.1f} requests in flight per engine" in text
    assert f"held-out rows of this model with {band_label(low, high)} requests in flight: TTFT {10 + low} % MAPE" in text
