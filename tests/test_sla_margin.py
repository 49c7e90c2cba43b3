"""Latency that matches silicon: a per-request cost in the scoring, an affine fit, and SLA margins from the measured
error, on the real replay (constructed calibration files; real Dynamo replays)."""

from __future__ import annotations

import pytest
from conftest import build, config_data, rejected

from spica_lib.base.versions import package_versions
from spica_lib.facts.calibration import CalibrationFile, HeldOutError, StepScale, write_calibration
from spica_lib.facts.kv_capacity import KvEstimator
from spica_lib.facts.parallel import ParallelShape, ReplicaConfig
from spica_lib.fidelity.fit import affine_ttft
from spica_lib.replay.request import replay_call
from spica_lib.replay.sla_adjust import SlaAdjustment, adjusted_metrics
from spica_lib.trial.evaluate import evaluate_trial, prepare_trial

VERSION = "0.24.0"
SELECTION = {"deployment_mode": "agg", "backend": "vllm", "router_mode": "round_robin",
             "planner_scaling_policy": "disabled", "agg_max_num_batched_tokens": 8192, "agg_max_num_seqs": 256}  # fmt: skip


def calibration(tmp_path, overhead=0.0, ttft_p90=0.0, tpot_p90=0.0):
    """A calibration file for Qwen3-32B / vLLM on H200: unit scales, a per-request cost, measured quantiles."""
    scale = StepScale(system="h200_sxm", backend="vllm", model="Qwen/Qwen3-32B", prefill=1.0, decode=1.0, fit_rows=8,
                      modes=["agg"], ttft_overhead_ms=overhead, fit="affine" if overhead else "scale")  # fmt: skip
    error = HeldOutError(system="h200_sxm", backend="vllm", model="Qwen/Qwen3-32B", rows=8,
                         uncalibrated={"ttft_ms": 40.0, "tpot_ms": 20.0, "tokens_per_second_per_gpu": 20.0},
                         calibrated={"ttft_ms": 15.0, "tpot_ms": 8.0, "tokens_per_second_per_gpu": 8.0},
                         under_p90={"ttft_ms": ttft_p90, "tpot_ms": tpot_p90})  # fmt: skip
    path = tmp_path / "cal.yaml"
    write_calibration(path, CalibrationFile(source="your rows: test", split="test", scales=[scale], held_out=[error],
                                            versions=package_versions()))  # fmt: skip
    return path


def config(tmp_path=None, goal=None, cal=None, **workload):
    data = config_data(search_space={"backend": ["vllm"]},
                       workload={"isl": 1024, "osl": 64, "request_rate": 8.0, "num_request_ratio": 25, **workload})  # fmt: skip
    data["goal"] = goal or {"target": "goodput_per_gpu", "sla": {"ttft_ms": 2000, "itl_ms": 50}}
    if cal is not None:
        data["calibration"] = str(cal)
    return build(data, base_dir=tmp_path)


def replayed(cfg, tp=1, replicas=1):
    layout = ReplicaConfig(shape=ParallelShape(tp=tp), replicas=replicas)
    spec = prepare_trial(cfg, SELECTION, layout, backend_version=VERSION,
                         estimator=KvEstimator("Qwen/Qwen3-32B", "h200_sxm", {"vllm": VERSION}))  # fmt: skip
    return spec, evaluate_trial(spec, max_eval_seconds=120)


def test_the_affine_fit_recovers_a_scale_and_a_per_request_cost_that_a_scale_alone_cannot():
    replayed_ttft = [60.0, 120.0, 400.0, 900.0, 2000.0]
    measured = [1.4 * r + 180.0 for r in replayed_ttft]  # light load: the cost dominates; heavy: the scale does
    scale, cost = affine_ttft(list(zip(replayed_ttft, measured, strict=True)))
    assert scale == pytest.approx(1.4) and cost == pytest.approx(180.0)
    # No cost in the data: none is fitted (it is never negative).
    scale, cost = affine_ttft([(r, 0.9 * r) for r in replayed_ttft])
    assert scale == pytest.approx(0.9) and cost == pytest.approx(0.0, abs=1e-6)


def test_a_per_request_cost_shifts_ttft_and_judges_goodput_against_the_bound_less_the_cost(tmp_path):
    cost = 300.0
    cal = config(tmp_path, cal=calibration(tmp_path, overhead=cost))
    spec, with_cost = replayed(cal)
    assert spec.replay.adjust.ttft_overhead_ms == cost and spec.sample["ttft_overhead_ms"] == cost
    # The replay itself judges each request by the bound less the cost (Dynamo's goodput, and the early stops).
    call = replay_call(spec.replay)
    assert call["kwargs"]["sla_ttft_ms"] == 2000 - cost
    # The same deployment, no cost, its SLA already tightened by it: the same goodput, TTFT lower by the cost.
    tight = config(goal={"target": "goodput_per_gpu", "sla": {"ttft_ms": 2000 - cost, "itl_ms": 50}})
    _, plain = replayed(tight)
    assert with_cost.metrics["mean_ttft_ms"] == pytest.approx(plain.metrics["mean_ttft_ms"] + cost)
    assert with_cost.metrics["p99_ttft_ms"] == pytest.approx(plain.metrics["p99_ttft_ms"] + cost)
    assert with_cost.metrics["goodput_output_throughput_tok_s"] == pytest.approx(plain.metrics["goodput_output_throughput_tok_s"])
    # A trial without a calibration keeps its key: nothing about the adjustment is in it.
    untouched, _ = replayed(config())
    assert "adjust" not in untouched.replay.model_dump() and untouched.replay.adjust is None


def test_a_closed_loop_pays_the_cost_in_throughput_too():
    adjust = SlaAdjustment(ttft_overhead_ms=100.0, closed_loop=True)
    metrics = {"mean_e2e_latency_ms": 900.0, "output_throughput_tok_s": 1000.0, "mean_ttft_ms": 50.0, "std_ttft_ms": 5.0}
    out = adjusted_metrics(metrics, adjust)
    assert out["output_throughput_tok_s"] == pytest.approx(900.0) and out["mean_ttft_ms"] == 150.0
    assert out["mean_e2e_latency_ms"] == 1000.0 and out["std_ttft_ms"] == 5.0  # a spread does not move


def test_a_deployment_at_the_slas_edge_is_refused_when_the_measured_error_could_put_it_over(tmp_path):
    # A hard p90 TTFT bound 10 % above what the replay says: a simulated margin of 10 %. The calibration measured
    # that silicon was up to 25 % slower than predicted (p90): the margin is smaller than the error.
    loose = config(goal={"target": "goodput_per_gpu", "sla": {"ttft_ms": 10_000, "itl_ms": 1000, "percentile": 90}})
    _, free = replayed(loose)
    edge = 1.1 * free.metrics["p90_ttft_ms"]
    goal = {"target": "goodput_per_gpu", "sla": {"ttft_ms": edge, "itl_ms": 1000, "percentile": 90}}
    cal = calibration(tmp_path, ttft_p90=0.25, tpot_p90=0.05)
    _, plain = replayed(config(tmp_path, goal=goal, cal=cal))
    assert plain.status == "feasible"  # on the simulated margin alone it is in
    spec, safe = replayed(config(tmp_path, goal={**goal, "sla_safety": "measured"}, cal=cal))
    assert spec.replay.screen is not None  # the early stops are on, and judged by the tightened bound
    assert spec.replay.adjust.ttft_factor == pytest.approx(1 / 1.25)
    rules = replay_call(spec.replay)["stop"]
    assert rules["bounds"] == [["p90_ttft_ms", pytest.approx(edge / 1.25)], ["p90_itl_ms", pytest.approx(1000 / 1.05)]]
    assert safe.status == "infeasible" and "p90" in safe.reason


def test_a_safety_margin_with_nothing_measured_to_set_it_is_refused(tmp_path):
    goal = {"target": "goodput_per_gpu", "sla": {"ttft_ms": 2000, "itl_ms": 50}, "sla_safety": "measured"}
    data = config_data(search_space={"backend": ["vllm"]}, goal=goal)
    rejected(data, "", "goal.sla_safety: measured tightens the SLA by a calibration's measured held-out error")
    scale = StepScale(system="h200_sxm", backend="vllm", model="Qwen/Qwen3-32B", prefill=1.0, decode=1.0, fit_rows=8)
    path = tmp_path / "bare.yaml"
    write_calibration(path, CalibrationFile(source="s", split="t", scales=[scale]))
    data["calibration"] = str(path)
    rejected(data, "", "has none for backend(s) ['vllm']")


def constructed_checks(models: dict[str, tuple[float, float]], system="h200_sxm", backend="vllm"):
    """Rows of each model whose silicon is `scale` x the replay + `cost` ms on TTFT, 1.1 x on TPOT."""
    from spica_lib.fidelity.check import Point, RowCheck
    from spica_lib.fidelity.silicon import SiliconRow, tokens_per_second_per_gpu

    out = []
    for model, (scale, cost) in models.items():
        for i, (concurrency, replayed_ttft) in enumerate(((1, 80.0), (4, 160.0), (16, 600.0), (64, 2400.0))):
            ttft, tpot = scale * replayed_ttft + cost, 1.1 * 20.0
            row = SiliconRow(id=f"{model}{i}", system=system, backend=backend, measured_version="0.12.0", model=model,
                             precision="", isl=1024, osl=128, concurrency=concurrency, ttft_ms=ttft, tpot_ms=tpot)  # fmt: skip
            tokens = tokens_per_second_per_gpu(concurrency, 128, replayed_ttft, 20.0, row.gpus)
            out.append(RowCheck(row=row, measured=Point(ttft_ms=ttft, tpot_ms=tpot, tokens_per_second_per_gpu=row.tokens_per_second_per_gpu),
                                replayed=Point(ttft_ms=replayed_ttft, tpot_ms=20.0, tokens_per_second_per_gpu=tokens)))  # fmt: skip
    return out


def test_a_prior_is_kept_only_where_it_beats_no_correction_on_models_it_was_not_fitted_on():
    from spica_lib.fidelity.prior import fit_prior

    alike = constructed_checks({"a/x": (1.3, 120.0), "b/y": (1.3, 120.0), "c/z": (1.3, 120.0)})
    scales, (verdict,) = fit_prior(alike)
    assert verdict.helps and verdict.prior["ttft_ms"] < 1 and verdict.uncorrected["ttft_ms"] > 30
    assert scales[0].prefill == pytest.approx(1.3) and scales[0].ttft_overhead_ms == pytest.approx(120.0)
    # Models whose errors go opposite ways: the others' fit predicts each one worse than no correction.
    opposite = constructed_checks({"a/x": (1.8, 0.0), "b/y": (0.55, 0.0), "c/z": (1.0, 0.0)}, backend="sglang")
    scales, (verdict,) = fit_prior(opposite)
    assert not verdict.helps and scales == []


def test_a_sweep_without_a_calibration_takes_the_prior_where_it_was_kept_and_says_so(tmp_path, monkeypatch):
    import spica_lib.config.calibration as calibration_module
    from spica_lib.fidelity.prior import fit_prior

    kept = constructed_checks({"a/x": (1.3, 120.0), "b/y": (1.3, 120.0), "c/z": (1.3, 120.0)})
    dropped = constructed_checks({"a/x": (1.8, 0.0), "b/y": (0.55, 0.0), "c/z": (1.0, 0.0)}, backend="sglang")
    scales, verdicts = fit_prior(kept + dropped)
    prior = tmp_path / "prior.json"
    write_calibration(prior, CalibrationFile(source="constructed rows", split="lomo", scales=scales, cross_validated=verdicts))
    monkeypatch.setattr(calibration_module, "PRIOR_FILE", prior)
    cfg = build(config_data(search_space={"backend": ["vllm", "sglang"]}))
    assert cfg.calibration.prior and set(cfg.calibration.scales) == {"vllm"}  # sglang's prior did not help: none
    assert cfg.calibration.scales["vllm"].ttft_overhead_ms == pytest.approx(120.0)
    assert "the prior" in cfg.calibration.source
    words = calibration_module.prior_verdicts("h200_sxm", ["vllm", "sglang"])
    assert words[0].startswith("kept: h200_sxm / vllm") and words[1].startswith("not kept, it did not beat no correction")
    # `calibration: none` turns it off; several GPU types never take it (a correction is for one).
    off = build(config_data(search_space={"backend": ["vllm"]}) | {"calibration": "none"})
    assert off.calibration.off and off.calibration.scales == {}
    layout = ReplicaConfig(shape=ParallelShape(tp=1), replicas=1)
    plain = prepare_trial(off, SELECTION, layout, backend_version=VERSION,
                          estimator=KvEstimator("Qwen/Qwen3-32B", "h200_sxm", {"vllm": VERSION}))  # fmt: skip
    assert plain.replay.adjust is None and "prefill_step_scale" not in plain.sample
