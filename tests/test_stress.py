"""The stress test: the finished top with perturbed step times, and the verdict it gives."""

import pytest
from test_trial_replay import agg, config, spec_for

from spica_lib.results.stress import Perturbation, perturbed, stress_specs, stressed
from spica_lib.trial.evaluate import evaluate_trial
from spica_lib.trial.spec import TrialResult


@pytest.mark.slow
def test_a_perturbed_replay_uses_the_scaled_step_times():
    spec = spec_for(config(), agg(2, 1))
    base = evaluate_trial(spec, max_eval_seconds=120).metrics
    slower_decode = evaluate_trial(perturbed(spec, Perturbation(role="decode", scale=1.15)), max_eval_seconds=120).metrics
    slower_prefill = evaluate_trial(perturbed(spec, Perturbation(role="prefill", scale=1.15)), max_eval_seconds=120).metrics
    assert slower_decode["mean_itl_ms"] > base["mean_itl_ms"] * 1.08  # decode steps 15 % slower: ITL with them
    assert slower_prefill["mean_ttft_ms"] > base["mean_ttft_ms"]
    engine = perturbed(spec, Perturbation(role="decode", scale=1.15)).replay.plan
    assert engine != spec.replay.plan and perturbed(spec, Perturbation(role="decode", scale=1.15)).key() != spec.key()


def result(score):
    return TrialResult(status="feasible", score=score, used_gpus=2, metrics={})


def test_the_verdict_names_the_perturbation_under_which_another_deployment_overtakes_the_recommendation():
    spec = spec_for(config(), agg(2, 1))
    top = {"a" * 64: spec, "b" * 64: spec}  # the finish's order: a is the recommendation
    names = list(stress_specs(top, 0.15))
    assert len(names) == 8 and all("~" in name for name in names)
    unperturbed = {"a" * 64: 101.0, "b" * 64: 100.0}
    # b overtakes only when decode steps are slower (made-up scores: the verdict's own logic).
    scores = {name: result(110.0 if name.startswith("b") and name.endswith("decodex1.15") else 100.0 + name.startswith("a"))
              for name in names}  # fmt: skip
    verdict = stressed(top, 0.15, scores, unperturbed)
    assert verdict.survives is False and verdict.flips == [
        "if decode steps are 15 % slower than simulated, #2 scores above #1 (not so unperturbed on the same traffic)"
    ]
    assert verdict.exact and verdict.unperturbed == unperturbed
    calm = stressed(top, 0.15, {name: result(101.0 if name.startswith("a") else 100.0) for name in names}, unperturbed)
    assert calm.survives is True and calm.sentence.startswith("#1 keeps its place")
    assert stressed({"a" * 64: spec}, 0.15, {}, {}).sentence is None  # one deployment: nothing to compare


def test_the_perturbed_order_is_compared_with_the_unperturbed_order_of_the_same_rows_and_an_exact_tie_is_a_tie():
    spec = spec_for(config(), agg(2, 1))
    top = {"a" * 64: spec, "b" * 64: spec}
    names = list(stress_specs(top, 0.15))
    # b is above a already unperturbed (a was recommended on fresh samples, or for fewer GPUs): a perturbation
    # that keeps b above a changes no order, and one under which they tie exactly flips nothing either.
    above = stressed(top, 0.15, {name: result(120.0 if name.startswith("b") else 100.0) for name in names},
                     {"a" * 64: 100.0, "b" * 64: 110.0})  # fmt: skip
    tie = stressed(top, 0.15, {name: result(100.0) for name in names}, {"a" * 64: 100.0, "b" * 64: 100.0})
    assert above.survives is True and tie.survives is True
