"""The stress test: the finished top with perturbed step times, and the verdict it gives."""

import pytest
from test_trial_replay import agg, busy, config, spec_for

from spica_lib.results.stress import (
    Perturbation,
    first_replays,
    perturbed,
    second_replays,
    stress_specs,
    stressed,
)
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
    # The bound the stress test skips replays by: a static round-robin deployment scores no better with slower steps.
    scores = [evaluate_trial(perturbed(spec, Perturbation(role=role, scale=1.15)), max_eval_seconds=120).score
              for role in ("prefill", "decode")]  # fmt: skip
    assert all(score <= evaluate_trial(spec, max_eval_seconds=120).score for score in scores)
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


def test_a_round_robin_deployment_is_not_replayed_slower_when_its_unperturbed_score_is_already_at_most_the_first_s():
    throughput = config(goal={"target": "throughput"})  # no prune bar: a throughput score has no early bound
    spec = spec_for(throughput, agg(2, 1))
    kv = spec_for(throughput, agg(2, 2), router_mode="kv_router")  # two workers: a router to choose
    a, b, c, d = ("a" * 64, "b" * 64, "c" * 64, "d" * 64)
    top = {a: spec, b: spec, c: spec, d: kv}
    first = first_replays(top, 0.15)
    # #1 under every perturbation, the KV-router row under every one (no bound), the others only faster.
    assert {n for n in first if n.startswith(a)} == {n for n in stress_specs(top, 0.15) if n.startswith(a)}
    assert len([n for n in first if n.startswith(d)]) == 4
    assert sorted(n.split("~")[1] for n in first if n.startswith(b)) == ["decodex0.85", "prefillx0.85"]
    unperturbed = {a: 120.0, b: 90.0, c: 105.0, d: 80.0}
    results = {name: result(100.0) for name in first}  # #1 scores 100 under each perturbation
    more = second_replays(top, 0.15, results, unperturbed)
    # b (90 unperturbed) cannot pass 100 with slower steps; c (105) could, so it is replayed.
    assert sorted(more) == sorted(n for n in stress_specs(top, 0.15) if n.startswith(c) and "x1.15" in n)
    verdict = stressed(top, 0.15, {**results, **{n: result(95.0) for n in more}}, unperturbed)
    skipped = [s for s in verdict.scores if s.status == "skipped"]
    assert {(s.key, s.perturbation.name) for s in skipped} == {(b, "prefillx1.15"), (b, "decodex1.15")}
    assert all(s.at_most == 90.0 and s.score is None for s in skipped) and verdict.survives is True
    # An infeasible #1 under a perturbation bounds nothing but an infeasible deployment.
    worse = {**results, **{n: TrialResult(status="infeasible", reason="ttft", used_gpus=2, metrics={}) for n in first if n.startswith(a)}}
    assert len(second_replays(top, 0.15, worse, unperturbed)) == 4
    with pytest.raises(KeyError, match="no stress replay"):
        stressed(top, 0.15, {n: r for n, r in results.items() if not n.startswith(a)}, unperturbed)


def pruned(bound, below):
    from spica_lib.replay.request import EarlyStop

    stop = EarlyStop(rule="prune", at_sim_ms=1.0, requests=100, certain_misses=10, score_bound=bound, below=below,
                     rank=1, why="its score can reach at most ...")  # fmt: skip
    return TrialResult(status="pruned", reason="pruned: ...", used_gpus=2, metrics={}, stop=stop)


def test_with_a_goodput_goal_the_others_replay_after_the_first_with_its_perturbed_score_as_their_bar():
    from spica_lib.results.stress import stress_bars

    spec = spec_for(config(), agg(2, 1))  # goodput per GPU under an SLA: its replays can be pruned
    a, b, c = ("a" * 64, "b" * 64, "c" * 64)
    top = {a: spec, b: spec, c: spec}
    first = first_replays(top, 0.15)
    assert sorted(first) == sorted(n for n in stress_specs(top, 0.15) if n.startswith(a))  # #1's alone
    results = {name: result(100.0 + i) for i, name in enumerate(first)}  # #1's score under each perturbation
    unperturbed = {a: 120.0, b: 90.0, c: 105.0}
    more = second_replays(top, 0.15, results, unperturbed)
    # b (90) cannot pass #1 with slower steps: skipped; every other replay of b and c runs, each with a bar.
    assert sorted(more) == sorted(n for n in stress_specs(top, 0.15) if n[0] in "bc" and not (n[0] == "b" and "x1.15" in n))
    bars = stress_bars(top, 0.15, results)
    for name in more:
        mine = results[a + name[64:]]
        assert bars[name].below == mine.score
    # A pruned replay is certainly below #1 there: no flip, shown with its bound.
    outcome = {**results, **{n: pruned(bars[n].below - 1.0, bars[n].below) for n in more}}
    verdict = stressed(top, 0.15, outcome, unperturbed)
    stopped = [s for s in verdict.scores if s.status == "pruned"]
    assert len(stopped) == len(more) and all(s.score is None and s.at_most is not None for s in stopped)
    assert verdict.survives is True and "cannot overtake #1" in stopped[0].reason
    # An infeasible #1 under a perturbation is no bar: the others replay to their end there.
    infeasible = {**results, first_name(a): TrialResult(status="infeasible", reason="ttft", used_gpus=2, metrics={})}
    assert not any(name.endswith(first_name(a)[64:]) for name in stress_bars(top, 0.15, infeasible))


def first_name(key):
    return f"{key}~prefillx1.15"


@pytest.mark.slow
def test_a_perturbed_replay_pruned_against_the_first_s_score_is_never_above_it():
    from spica_lib.trial.evaluate import evaluate_trials
    from spica_lib.trial.screen import PruneBar

    cfg = busy()  # 40 req/s: one TP1 worker falls behind, four TP2 keep up
    faster = Perturbation(role="prefill", scale=0.85)
    weaker = perturbed(spec_for(cfg, agg(1, 1)), faster)
    full = evaluate_trial(weaker, max_eval_seconds=120)
    first = evaluate_trial(perturbed(spec_for(cfg, agg(2, 4)), faster), max_eval_seconds=120)
    bar = PruneBar(below=first.score, rank=1)  # #1's score under the same perturbation
    ((_, stopped),) = evaluate_trials({"x": weaker}, max_eval_seconds=120, prune={"x": bar})
    assert stopped.status == "pruned" and full.score <= stopped.stop.score_bound < bar.below
    # It stopped before the replay's end (simulated time, not CPU seconds: those vary with the machine's load).
    assert stopped.stop.at_sim_ms < full.metrics["duration_ms"]
