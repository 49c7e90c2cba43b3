"""Baselines: aiconfigurator's own pick, the best without the planner, the best with the default router.

The plan tests give real trial specs made-up results (`fake_result`) to test which deployment each
baseline is; aiconfigurator's pick and the sweep's baselines (tests/test_report.py) are real.
"""

import pytest
from conftest import build, config_data, rejected

from spica_lib.baselines.aiconfigurator_cache import cached_search
from spica_lib.baselines.aiconfigurator_pick import aiconfigurator_pick, sized_to_load
from spica_lib.baselines.compare import compare, ratio_text
from spica_lib.baselines.model import Baseline
from spica_lib.baselines.plan import plan_baselines, settle
from spica_lib.facts.parallel import DisaggConfig, ParallelShape, ReplicaConfig
from spica_lib.trial.evaluate import prepare_trial
from spica_lib.trial.spec import TrialRecord, TrialResult

VERSION = "0.24.0"  # vLLM perf DB behind the `current` slot on h200_sxm


def test_baselines_are_on_by_default_and_refused_where_there_is_no_single_score_or_traffic():
    assert build(config_data()).sweep.baselines is True
    pareto = config_data(goal={"target": "pareto"})
    pareto["workload"] = {"isl": 1024, "osl": 128, "kv_load_ratio": [0.5, 1.0], "num_request_ratio": 10}
    assert build(pareto).sweep.baselines is False
    rejected({**pareto, "sweep": {"baselines": True}}, "", "sweep.baselines", "'pareto'")
    per_candidate = config_data(goal={"target": "throughput"})
    per_candidate["workload"] = {"isl": 1024, "osl": 128, "kv_load_ratio": 0.5, "num_request_ratio": 10}
    rejected({**per_candidate, "sweep": {"baselines": True}}, "", "sweep.baselines", "kv_load_ratio")
    config = build(config_data(sweep={"baselines": False}))
    assert config.sweep.baselines is False and build(config.model_dump(mode="json")) == config


def fake_result(score, status="feasible", gpus=4):
    return TrialResult(status=status, score=score if status == "feasible" else None, used_gpus=gpus,
                       reason=None if status == "feasible" else "made up")  # fmt: skip


def baseline(score, status="feasible"):
    return Baseline(name="no_planner", label="the best without the planner", source="search",
                    result=fake_result(score, status))  # fmt: skip


def test_ratios_say_how_many_times_better_the_winner_is_for_either_direction_of_goal():
    maximise = build(config_data(goal={"target": "throughput"})).goal
    (ratio,) = compare(maximise, 300.0, [baseline(100.0)])
    assert ratio.ratio == pytest.approx(3.0)
    # The ratio says what it divides: the baseline's own score in the target's unit, on how many GPUs.
    assert ratio_text(ratio, maximise) == "the winner scores 3.00x the best without the planner (100 tok/s, on 4 GPUs)"
    cost = build(config_data(goal={"target": "cost_per_million_output_tokens", "gpu_hour_usd": 3.0})).goal
    (cheaper,) = compare(cost, -0.5, [baseline(-2.0)])  # scores are negated costs: 0.5 $ against 2 $
    assert cheaper.ratio == pytest.approx(4.0)
    assert ratio_text(cheaper, cost).startswith("the winner is 75 % cheaper than the best without the planner")
    latency = build(config_data(goal={"target": "e2e_latency"}, sweep={"finish_samples": 0})).goal
    (faster,) = compare(latency, -4448.0, [baseline(-4000.0)])  # the baseline was faster: say so, not "1.00x"
    assert ratio_text(faster, latency).startswith("the winner is 11 % slower than the best without the planner")
    zero, failed, missed = compare(maximise, 300.0, [baseline(0.0), baseline(None, status="timed_out"),
                                                     baseline(None, status="infeasible")])  # fmt: skip
    assert zero.ratio is None and "no ratio" in zero.note
    assert failed.ratio is None and failed.score is None and failed.note.startswith("timed_out: made up")
    assert ratio_text(missed, maximise) == "the best without the planner misses the SLA: made up"


def record(config, gpus_per_replica, router, planner, score):
    selection = {"deployment_mode": "agg", "backend": "vllm", "router_mode": router, "planner_scaling_policy": planner,
                 "agg_max_num_batched_tokens": 8192, "agg_max_num_seqs": 256, "overlap_score_credit": 1.0,
                 "prefill_load_scale": 1.0, "router_temperature": 0.0, "planner_fpm_sampling": "default",
                 "planner_load_sensitivity": "default", "load_predictor_candidates": "constant_last"}  # fmt: skip
    layout = ReplicaConfig(shape=ParallelShape(tp=gpus_per_replica), replicas=2)
    spec = prepare_trial(config, selection, layout, backend_version=VERSION)
    return TrialRecord(key=spec.key(), spec=spec, result=fake_result(score, gpus=layout.total_gpus))


def test_each_ablation_is_the_better_of_the_search_s_best_without_it_and_the_winner_replayed_without_it():
    config = build(config_data(search_space={"planner_scaling_policy": ["disabled", "load_180_5"]}))
    winner = record(config, 2, "kv_router", "load_180_5", 500.0)
    no_planner = record(config, 1, "kv_router", "disabled", 300.0)
    round_robin = record(config, 4, "round_robin", "load_180_5", 200.0)
    records = {r.key: r for r in (winner, no_planner, round_robin)}
    ranked = [winner.key, no_planner.key, round_robin.key]
    from spica_lib.baselines.model import AiconfiguratorPick

    cases = {c.baseline.name: c for c in plan_baselines(config, records, ranked, AiconfiguratorPick(problem="x"), {})}
    assert cases["aiconfigurator"].replay is None and cases["aiconfigurator"].baseline.note == "x"
    for name, searched, changed in (("no_planner", no_planner, "planner_scaling_policy"),
                                    ("default_router", round_robin, "router_mode")):  # fmt: skip
        case = cases[name]
        assert case.replay is not None and case.baseline.searched_alternative == searched.key
        assert case.replay.parallel_config == winner.spec.parallel_config
        assert (
            case.replay.replay.workload == winner.spec.replay.workload
            and case.replay.replay.sla == winner.spec.replay.sla
        )
        assert case.replay.sample[changed] != winner.spec.sample[changed]
        # The winner replayed without the feature is the baseline unless the search found better without it.
        assert settle(case, fake_result(450.0), records).key == case.replay.key()
        assert settle(case, fake_result(100.0), records).key == searched.key
    # A winner that already runs without the feature is its own baseline, with nothing to replay.
    records_rr = {round_robin.key: round_robin}
    cases = {
        c.baseline.name: c
        for c in plan_baselines(config, records_rr, [round_robin.key], AiconfiguratorPick(problem="x"), {})
    }
    assert cases["default_router"].replay is None and cases["default_router"].baseline.key == round_robin.key


@pytest.mark.slow
def test_aiconfigurator_picks_a_deployment_of_the_search_space_within_the_budget():
    config = build(config_data(search_space={"backend": ["vllm"], "gpu_budget": 4},
                               goal={"target": "goodput_per_gpu", "sla": {"ttft_ms": 2000, "itl_ms": 50}}))  # fmt: skip
    pick = aiconfigurator_pick(config)
    assert pick.problem is None, pick.problem
    assert pick.backend == "vllm" and pick.deployment_mode in ("agg", "disagg")
    assert set(pick.considered) <= {"agg/vllm", "disagg/vllm"} and pick.considered
    assert pick.parallel_config.total_gpus <= 4 and all(n >= 1 for n in pick.max_num_seqs.values())
    assert (pick.isl, pick.osl, pick.ttft_ms, pick.tpot_ms) == (1024, 128, 2000.0, 50.0)
    assert pick.estimate["tpot"] <= 50.0  # aiconfigurator's own estimate of its pick meets the bound it was given
    # Given the run's catalog facts (config.json), the pick reads its perf-DB versions there: the same pick.
    from spica_lib.facts.catalog import CatalogFacts, versions_on

    known = CatalogFacts(hardware_sku="h200_sxm", model_name="Qwen/Qwen3-32B", model_source="aiconfigurator",
                         perf_db_versions=versions_on("h200_sxm", ["vllm"]))  # fmt: skip
    again = aiconfigurator_pick(config, known)
    assert again.model_dump(exclude={"seconds"}) == pick.model_dump(exclude={"seconds"})
    elsewhere = known.model_copy(update={"hardware_sku": "h100_sxm", "perf_db_versions": {"vllm": "no-such"}})
    assert aiconfigurator_pick(config, elsewhere).model_dump(exclude={"seconds"}) == pick.model_dump(exclude={"seconds"})


AGG_ROW = {"seq/s": 6.4, "num_total_gpus": 2}
DISAGG_ROW = {"(p)seq/s/worker": 4.9, "(d)seq/s/worker": 28.2}


def test_aiconfigurator_s_pick_is_sized_to_the_offered_load_not_to_the_budget():
    agg = ReplicaConfig(shape=ParallelShape(tp=2), replicas=4)  # as aiconfigurator filled 8 GPUs
    sized, how = sized_to_load("agg", AGG_ROW, agg, 8, rate=8.0)
    assert sized.replicas == 2 and "2 replica(s) for 8 req/s" in how  # ceil(8 / 6.4)
    sized, how = sized_to_load("agg", AGG_ROW, agg, 8, rate=40.0)
    assert sized.replicas == 4 and "the budget's most" in how and "needs 7" in how
    disagg = DisaggConfig(prefill=ReplicaConfig(shape=ParallelShape(tp=1), replicas=6),
                          decode=ReplicaConfig(shape=ParallelShape(tp=2), replicas=1))  # fmt: skip
    sized, how = sized_to_load("disagg", DISAGG_ROW, disagg, 8, rate=8.0)
    assert (sized.prefill.replicas, sized.decode.replicas, sized.total_gpus) == (2, 1, 4)
    over, how = sized_to_load("disagg", DISAGG_ROW, disagg, 8, rate=40.0)  # 9 prefill workers: over 8 GPUs
    assert over == disagg and "cannot serve 40 req/s within 8 GPUs" in how
    same, how = sized_to_load("agg", AGG_ROW, agg, 8, rate=None)
    assert same == agg and "closed-loop" in how


def test_aiconfigurator_s_answers_are_kept_by_their_inputs_and_versions(tmp_path, monkeypatch):
    monkeypatch.setenv("SPICA_AIC_CACHE", str(tmp_path))
    calls = []

    def fake_search():  # stands in for aiconfigurator's cli_default (our cache's control flow only)
        calls.append(1)
        return {"agg": {"seq/s": 6.4, "tp": 2, "_per_ops_source": {"x": "silicon"}, "nan": float("nan")}}

    first = cached_search({"isl": 2048}, fake_search)
    assert cached_search({"isl": 2048}, fake_search) == first == {"agg": {"seq/s": 6.4, "tp": 2}}
    assert len(calls) == 1
    cached_search({"isl": 4096}, fake_search)  # other inputs: searched
    assert len(calls) == 2
    for path in tmp_path.glob("*.json"):
        path.write_text("{torn")
    cached_search({"isl": 2048}, fake_search)  # an unreadable file: searched again
    assert len(calls) == 3


def test_aiconfigurator_s_pick_that_the_search_already_replayed_is_not_replayed_again():
    from spica_lib.baselines.model import AiconfiguratorPick

    config = build(config_data(search_space={"planner_scaling_policy": ["disabled"]}))
    # The pick as the baseline builds it: round robin, no planner, the space's first knob values, its batch size.
    found = record(config, 2, "round_robin", "disabled", 400.0)
    pick = AiconfiguratorPick(deployment_mode="agg", backend="vllm", parallel_config=found.spec.parallel_config,
                              max_num_seqs={"agg": 256}, aiconfigurator_version="0.12.0")  # fmt: skip
    (aic, *_) = plan_baselines(config, {found.key: found}, [found.key], pick, {})
    assert aic.baseline.key == found.key
    assert aic.replay is None and aic.baseline.source == "search" and "the search replayed it too" in aic.baseline.note
