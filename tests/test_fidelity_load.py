"""The error by load (bands), where the TTFT goes (its two parts and the regression over rows), and the choice of
protocol and correction by cross-validation within the fitting half (never the held-out half)."""

from __future__ import annotations

import statistics

import pytest

from spica_lib.facts.calibration import CalibrationFile
from spica_lib.fidelity.attribution import TtftParts, parts_fit, ttft_regression
from spica_lib.fidelity.bands import ISL_BANDS, LOAD_BANDS, band_bounds, band_errors, band_of
from spica_lib.fidelity.calibrate import fit_calibration
from spica_lib.fidelity.check import Point, RowCheck
from spica_lib.fidelity.choice import choose, cross_validated, fit_correction
from spica_lib.fidelity.fit import fits
from spica_lib.fidelity.silicon import SiliconRow

BASE = dict(system="h100_sxm", backend="vllm", measured_version="0.12.0", model="Qwen/Qwen3-32B", precision="",
            isl=1024, osl=128, tp=2, ttft_ms=1.0, tpot_ms=1.0)  # fmt: skip
LOADS = (2, 4, 8, 16, 32, 64, 128, 256)


def ids(fitting: bool, count: int) -> list[str]:
    """Row ids on one side of the fixed split."""
    found = [f"r{i}" for i in range(400) if fits(SiliconRow(id=f"r{i}", concurrency=1, **BASE)) == fitting]
    return found[:count]


def check(row_id: str, concurrency: int, measured: float, queue: float, admit: float, tpot: float = 20.0,
          measured_tpot: float = 20.0, protocol: str = "a", isl: int = 1024) -> RowCheck:  # fmt: skip
    """A row replayed with TTFT = queue + admit, measured at `measured` (TPOT likewise)."""
    row = SiliconRow(**{**BASE, "id": row_id, "concurrency": concurrency, "isl": isl, "ttft_ms": measured,
                        "tpot_ms": measured_tpot})  # fmt: skip
    replayed = Point(ttft_ms=queue + admit, tpot_ms=tpot,
                     tokens_per_second_per_gpu=row.concurrency * 128 * 1000 / (queue + admit + 127 * tpot) / 2)  # fmt: skip
    return RowCheck(row=row, measured=Point(ttft_ms=measured, tpot_ms=measured_tpot,
                                            tokens_per_second_per_gpu=row.tokens_per_second_per_gpu),
                    replayed=replayed, protocol=protocol, parts=TtftParts(queue_ms=queue, admit_to_token_ms=admit))  # fmt: skip


def test_the_bands_are_contiguous_from_one_and_hold_every_row_once():
    for uppers in (LOAD_BANDS, ISL_BANDS):
        bounds = band_bounds(uppers)
        assert bounds[0][0] == 1 and bounds[-1][1] is None
        assert all(high + 1 == low for (_, high), (low, _) in zip(bounds, bounds[1:], strict=False))
        for value in range(1, 20000, 7):
            holding = [b for b in bounds if b[0] <= value and (b[1] is None or value <= b[1])]
            assert holding == [band_of(value, uppers)]
    assert band_of(8, LOAD_BANDS) == (1, 8) and band_of(9, LOAD_BANDS) == (9, 32) and band_of(33, LOAD_BANDS) == (33, None)


def test_band_errors_are_each_bands_own_rows_before_and_after():
    rows = ids(False, 4)
    before = [check(rows[0], 4, 100, 0, 150), check(rows[1], 8, 100, 0, 50), check(rows[2], 64, 200, 100, 100),
              check(rows[3], 128, 400, 0, 100, isl=8192)]  # fmt: skip
    after = [c.model_copy(update={"replayed": c.replayed.model_copy(update={"ttft_ms": c.measured.ttft_ms * 1.1})})
             for c in before]  # fmt: skip
    load = {(b.low, b.high): b for b in band_errors(before, after, "concurrency")}
    assert sorted(load) == [(1, 8), (33, None)]  # no row in 9-32: no band listed
    assert load[(1, 8)].rows == 2 and load[(1, 8)].uncalibrated["ttft_ms"] == pytest.approx(50.0)  # |+50 %|, |-50 %|
    assert load[(33, None)].uncalibrated["ttft_ms"] == pytest.approx((0 + 75) / 2)
    assert all(b.calibrated["ttft_ms"] == pytest.approx(10.0) for b in load.values())
    isl = {(b.low, b.high): b.rows for b in band_errors(before, after, "isl")}
    assert isl == {(1, 1024): 3, (4097, None): 1}


def test_the_regression_over_rows_recovers_how_each_part_is_off_and_says_how_sure():
    # Silicon queues at half the replay's wait, prefills 1.4x slower and adds 30 ms to every request.
    pairs = [(TtftParts(queue_ms=q, admit_to_token_ms=a), 0.5 * q + 1.4 * a + 30.0)
             for q, a in ((0, 100), (20, 120), (200, 150), (600, 160), (50, 400), (1500, 180), (10, 90), (900, 300))]
    queue, admit, cost = parts_fit(pairs)
    assert (queue, admit, cost) == pytest.approx((0.5, 1.4, 30.0), rel=1e-6)
    fitted = ttft_regression(pairs)
    assert fitted.fit_mape == pytest.approx(0.0, abs=1e-6)
    assert fitted.queue_interval[0] <= 0.5 <= fitted.queue_interval[1]
    # Noise widens the intervals; a coefficient is never negative.
    noisy = [(p, m * (1.15 if i % 2 else 0.87)) for i, (p, m) in enumerate(pairs)]
    wide = ttft_regression(noisy)
    assert wide.admit_interval[1] - wide.admit_interval[0] > fitted.admit_interval[1] - fitted.admit_interval[0]
    assert min(wide.queue, wide.admit, wide.cost_ms, wide.queue_interval[0]) >= 0


def test_a_queue_the_rows_never_exercise_keeps_its_coefficient_at_one():
    pairs = [(TtftParts(queue_ms=0.0, admit_to_token_ms=a), 2 * a) for a in (100, 200, 300)]
    assert parts_fit(pairs) == pytest.approx((1.0, 2.0, 0.0))


def runs_for(rows: list[str], held: list[str], truth, noisy_protocol_error: float):
    """Protocol "a" replays TTFT with the queue doubled (a load-dependent error); protocol "b" replays it right up
    to a factor of 1/1.3. Measured TTFT is `truth(queue, admit)`."""
    runs = {"a": [], "b": []}
    for i, row_id in enumerate(rows + held):
        c, queue, admit = LOADS[i % len(LOADS)], 4.0 * LOADS[i % len(LOADS)], 100.0 + 3 * i
        measured = truth(queue, admit)
        runs["a"].append(check(row_id, c, measured, 2 * queue, admit * (1 + noisy_protocol_error * (-1) ** i), protocol="a"))
        runs["b"].append(check(row_id, c, measured, queue / 1.3, admit / 1.3, protocol="b"))
    return runs


def test_the_choice_is_made_within_the_fitting_half_and_picks_the_protocol_and_correction_that_fit():
    fitting, held = ids(True, 8), ids(False, 6)
    runs = runs_for(fitting, held, lambda q, a: q + a, noisy_protocol_error=0.2)
    only_fitting = {p: [c for c in run if fits(c.row)] for p, run in runs.items()}
    choice, fitted = choose(("h100_sxm", "vllm", "Qwen/Qwen3-32B"), only_fitting, "a")
    assert (choice.protocol, choice.applied) == ("b", "scale") and choice.fitting_rows == 8
    assert fitted["applied"].prefill == pytest.approx(1.3)
    kept = next(c for c in choice.candidates if (c.protocol, c.correction) == ("b", "scale"))
    assert kept.cv["ttft_ms"] == pytest.approx(0.0, abs=1e-9) and kept.admissible
    # The held-out half does not move the choice: the same fitting rows with any held-out rows choose alike.
    other = runs_for(fitting, held, lambda q, a: q + a if q < 0 else 5 * (q + a), noisy_protocol_error=0.2)
    again = choose(("h100_sxm", "vllm", "Qwen/Qwen3-32B"), {p: [c for c in run if fits(c.row)] for p, run in other.items()}, "a")
    assert (again[0].protocol, again[0].applied) == ("b", "scale")


def test_a_candidate_that_buys_ttft_with_tpot_is_not_kept():
    fitting = ids(True, 6)
    plain = [check(r, LOADS[i], 200.0 + i, 0, 100.0 + i, tpot=20.0, measured_tpot=20.0) for i, r in enumerate(fitting)]
    # Protocol "b" gets TTFT right but its TPOT is 50 % off, and its decode scale cannot fix that row by row.
    skewed = [check(r, LOADS[i], 200.0 + i, 0, 200.0 + i, tpot=30.0 if i % 2 else 10.0, measured_tpot=20.0, protocol="b")
              for i, r in enumerate(fitting)]  # fmt: skip
    choice, _ = choose(("h100_sxm", "vllm", "Qwen/Qwen3-32B"), {"a": plain, "b": skewed}, "a")
    refused = [c for c in choice.candidates if c.protocol == "b"]
    assert refused and not any(c.admissible for c in refused)
    assert choice.protocol == "a" and choice.applied in ("scale", "affine")


def test_a_load_dependent_error_only_the_parts_can_express_is_kept_report_only():
    fitting, held = ids(True, 8), ids(False, 4)
    # Silicon did not queue as the replay did: measured = 0.1 x queue + admit. No scale of the total fits all loads.
    runs = runs_for(fitting, held, lambda q, a: 0.1 * q + a, noisy_protocol_error=0.0)
    runs = {"b": runs["b"]}
    choice, fitted = choose(("h100_sxm", "vllm", "Qwen/Qwen3-32B"), {"b": [c for c in runs["b"] if fits(c.row)]}, "b")
    assert choice.report_only == "parts" and choice.applied in ("none", "scale", "affine")
    assert fitted["report_only"].queue == pytest.approx(0.13, rel=1e-6)  # 0.1 x 1.3: the replay's queue is 1/1.3
    cv = {c.correction: c.cv["ttft_ms"] for c in choice.candidates}
    assert cv["parts"] < 1e-6 < cv[choice.applied]


def test_a_scale_that_slows_decode_when_replayed_is_refused_on_the_fitting_rows():
    """The cross-validation predicts TPOT as replayed; applied through the replay, a prefill scale also slows the
    decode steps beside prefill chunks. A candidate whose fitting rows, replayed with its scales, come out worse than
    the uncorrected default on TPOT is refused, and one without scales is kept."""
    fitting, held = ids(True, 8), ids(False, 2)
    runs = runs_for(fitting, held, lambda q, a: q + a, noisy_protocol_error=0.2)
    only_fitting = {p: [c for c in run if fits(c.row)] for p, run in runs.items()}
    asked = []

    def slows_decode(protocol, correction, checks):
        asked.append((protocol, correction.label))
        return [c.model_copy(update={"replayed": c.replayed.model_copy(update={
            "ttft_ms": c.measured.ttft_ms, "tpot_ms": c.replayed.tpot_ms * correction.prefill})}) for c in checks]  # fmt: skip

    choice, fitted = choose(("h100_sxm", "vllm", "Qwen/Qwen3-32B"), only_fitting, "a", slows_decode)
    assert asked and len(asked) <= 2  # MAX_REPLAY_CHECKS candidates with scales replayed, in order
    refused = [c for c in choice.candidates if c.replay_admissible is False]
    assert refused and all(c.fitting_replay["tpot_ms"] > 0 for c in refused)
    assert choice.applied == "none" and not choice.decode_scaled and fitted["applied"].prefill == 1.0
    # Without the check (no replay to ask), the same rows keep protocol b's scale, as the cross-validation alone says.
    assert choose(("h100_sxm", "vllm", "Qwen/Qwen3-32B"), only_fitting, "a")[0].applied == "scale"


def test_leave_one_out_predicts_each_row_from_the_others():
    fitting = ids(True, 5)
    checks = [check(r, LOADS[i], 150.0 * (i + 1), 0, 100.0 * (i + 1)) for i, r in enumerate(fitting)]
    predicted = cross_validated("scale", checks)
    for i, p in enumerate(predicted):
        others = checks[:i] + checks[i + 1 :]
        assert p.replayed.ttft_ms == pytest.approx(fit_correction("scale", others).prefill * checks[i].replayed.ttft_ms)
    assert [p.replayed.ttft_ms for p in predicted] == pytest.approx([c.measured.ttft_ms for c in checks])


def test_the_fit_judges_the_held_out_half_only_after_choosing_and_writes_choices_and_bands():
    fitting, held = ids(True, 8), ids(False, 6)
    runs = runs_for(fitting, held, lambda q, a: q + a, noisy_protocol_error=0.2)
    right = {c.row.id: c for c in runs["b"]}
    replays = []

    def named_fake_rescale(rows, protocol, scale_for):
        """A stand-in for the second replay (our own control flow only): protocol b's replay scaled exactly."""
        replays.append((protocol.name, [r.id for r in rows]))
        out = []
        for row in rows:
            s, c = scale_for(row), right[row.id]
            point = c.replayed.model_copy(update={"ttft_ms": c.replayed.ttft_ms * s.prefill, "tpot_ms": c.replayed.tpot_ms * s.decode})
            out.append(c.model_copy(update={"replayed": point}))
        return out

    runs = {"aiconfigurator-benchmark": [c.model_copy(update={"protocol": "aiconfigurator-benchmark"}) for c in runs["a"]],
            "chunk-2048": [c.model_copy(update={"protocol": "chunk-2048"}) for c in runs["b"]]}  # fmt: skip
    outcome = fit_calibration(runs, "aiconfigurator-benchmark", named_fake_rescale, "test rows", {})
    # The fitting rows are replayed with the chosen scales before they are kept (system-wide, then the model's: a
    # prefill scale also slows decode steps, which the cross-validation cannot see); the held-out rows once, after
    # the choice, by the chosen protocol, as the test.
    assert replays == [("chunk-2048", fitting)] * 2 + [("chunk-2048", held)]
    assert all(c.replay_admissible for choice in outcome.calibration.choices for c in choice.candidates
               if (c.protocol, c.correction) == (choice.protocol, choice.applied) and c.decode_scaled == choice.decode_scaled)  # fmt: skip
    file = CalibrationFile.model_validate_json(outcome.calibration.model_dump_json())
    assert {(c.model, c.protocol, c.applied) for c in file.choices} == {(None, "chunk-2048", "scale"),
                                                                        ("Qwen/Qwen3-32B", "chunk-2048", "scale")}
    assert [c.row.id for c in outcome.uncalibrated] == held
    assert statistics.fmean(abs(c.replayed.ttft_ms / c.measured.ttft_ms - 1) for c in outcome.calibrated) < 1e-9
    bands = file.bands_for("h100_sxm", "vllm", "Qwen/Qwen3-32B")
    assert sum(b.rows for b in bands) == len(held) and all(b.calibrated["ttft_ms"] < 1e-6 for b in bands)


def test_a_config_keeps_its_models_load_bands_and_a_file_without_bands_reads_as_before(tmp_path):
    from conftest import build, config_data

    from spica_lib.facts.calibration import BandError, HeldOutError, StepScale, write_calibration

    scale = StepScale(system="h100_sxm", backend="vllm", model="Qwen/Qwen3-32B", prefill=1.2, decode=0.9, fit_rows=6)
    error = HeldOutError(system="h100_sxm", backend="vllm", model="Qwen/Qwen3-32B", rows=6,
                         uncalibrated={"ttft_ms": 40.0, "tpot_ms": 30.0}, calibrated={"ttft_ms": 8.0, "tpot_ms": 6.0})  # fmt: skip
    bands = [BandError(system="h100_sxm", backend="vllm", model=model, kind=kind, low=low, high=high, rows=3,
                       uncalibrated={"ttft_ms": 50.0, "tpot_ms": 30.0}, calibrated={"ttft_ms": float(low), "tpot_ms": 5.0})
             for model in ("Qwen/Qwen3-32B", "other/model") for kind in ("concurrency", "isl")
             for low, high in ((1, 8), (9, 32), (33, None))]  # fmt: skip
    data = config_data(search_space={"hardware_sku": "h100_sxm", "backend": ["vllm"]})
    plain = CalibrationFile(source="rows", split="test", scales=[scale], held_out=[error])
    write_calibration(tmp_path / "before.json", plain)
    write_calibration(tmp_path / "after.json", plain.model_copy(update={"bands": bands}))
    before = build({**data, "calibration": "before.json"}, base_dir=tmp_path).calibration.scales["vllm"].held_out
    after = build({**data, "calibration": "after.json"}, base_dir=tmp_path).calibration.scales["vllm"].held_out
    assert before.load_bands == [] and "load_bands" not in before.model_dump()  # hashes as it did before bands
    assert [(b.low, b.high, b.ttft_mape) for b in after.load_bands] == [(1, 8, 1.0), (9, 32, 9.0), (33, None, 33.0)]
    assert after.band_for(0.4).low == 1 and after.band_for(8.9).low == 1 and after.band_for(9.0).low == 9
    assert after.band_for(500.0).high is None
