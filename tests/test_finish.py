"""The finish: the search's top deployments on fresh traffic samples (its statistics: test_confidence.py)."""

import json
import subprocess
import sys

import pandas as pd
import pytest
import yaml
from conftest import REPO, build, config_data, rejected, write_yaml

from spica_lib.base.artifacts import read_model
from spica_lib.config.narrow import narrowed
from spica_lib.results.finish import FinishResult
from spica_lib.results.summary import SweepSummary

SPICA = [sys.executable, "-m", "spica_lib.cli", "run"]


# Config rules: a finish that could not change anything is refused.


def test_finish_settings_are_resolved_and_refused_where_they_do_nothing():
    config = build(config_data())
    sweep = config.sweep
    assert (sweep.finish_top, sweep.finish_samples, sweep.finish_max_samples, config.goal.robustness) == (4, 4, 16, "mean")
    assert config.goal.equivalence_margin.relative == 0.05
    assert build(config_data(goal={"target": "throughput", "equivalence_margin": 0.02})).goal.equivalence_margin.relative == 0.02
    absolute = build(config_data(goal={"target": "throughput", "equivalence_margin": {"absolute": 25}}))
    assert absolute.goal.equivalence_margin.absolute == 25
    rejected(config_data(goal={"equivalence_margin": 1.5}), "goal.equivalence_margin.relative", "less than 1")
    rejected(config_data(goal={"equivalence_margin": {"relative": 0.1, "absolute": 3}}), "goal.equivalence_margin",
             "exactly one of relative")  # fmt: skip
    rejected(config_data(sweep={"finish_samples": 8, "finish_max_samples": 4}), "", "finish_max_samples 4 is below")
    assert build(config_data(sweep={"finish_max_samples": 2})).sweep.finish_samples == 2  # the first look fits the cap
    assert config.workload.arrival_seed == 42  # the search's sample, recorded in config.json and every trial
    assert build(config.model_dump(mode="json")) == config  # the normalised config reads back
    rejected(config_data(sweep={"finish_samples": -1}), "sweep.finish_samples", "greater than or equal to 0")
    pareto = config_data(goal={"target": "pareto"}, sweep={"finish_samples": 3})
    pareto["workload"] = {"isl": 1024, "osl": 128, "kv_load_ratio": 0.5, "num_request_ratio": 10}
    rejected(pareto, "", "a 'pareto' goal has a front")
    closed = {"isl": 1024, "osl": 128, "concurrency": 8, "num_request_ratio": 10}
    exact = config_data(search_space={"router_mode": ["round_robin"]}, sweep={"finish_top": 3})
    exact["workload"] = closed
    rejected(exact, "", "every replay here is exact")
    off = config_data(sweep={"finish_samples": 0}, goal={"target": "throughput", "robustness": "worst"})
    rejected(off, "", "finish_samples is 0")
    margin_off = config_data(sweep={"finish_samples": 0}, goal={"target": "throughput", "equivalence_margin": 0.1})
    rejected(margin_off, "", "finish_samples is 0", "goal.equivalence_margin")
    exact_margin = config_data(search_space={"router_mode": ["round_robin"]}, goal={"equivalence_margin": 0.1})
    exact_margin["workload"] = closed
    rejected(exact_margin, "", "goal.equivalence_margin", "every replay here is exact")
    rejected(config_data(goal={"target": "throughput", "robustness": "p10"}, sweep={"finish_samples": 1}), "", "at least 2")


def test_the_rare_event_share_is_the_default_where_equivalences_are_claimed_and_refused_where_none_is():
    from spica_lib.config.finish_settings import rare_event_share

    config = build(config_data())
    assert config.goal.rare_event_share is None and rare_event_share(config) == 0.10  # the default, applied once
    own = build(config_data(goal={"target": "throughput", "rare_event_share": 0.2}))
    assert rare_event_share(own) == 0.2
    # How the finish compares replays, not what one replays: the trial keys and the run's config dump of the default
    # are those of before the setting existed.
    assert "rare_event_share" not in config.model_dump(mode="json")["goal"]
    rejected(config_data(goal={"target": "throughput", "rare_event_share": 1.0}), "goal.rare_event_share", "less than 1")
    for goal, sweep, why in (
        ({"robustness": "worst"}, {}, "the worst sample bounds nothing"),
        ({}, {"finish_top": 1}, "finish_top 1 no deployment is compared"),
        ({}, {"finish_samples": 0}, "finish_samples is 0"),
    ):
        data = config_data(goal={"target": "throughput", "rare_event_share": 0.2, **goal}, sweep=sweep)
        rejected(data, "", "goal.rare_event_share", why)
    assert rare_event_share(build(config_data(goal={"target": "throughput", "robustness": "worst"}))) is None


def test_arrival_seed_is_refused_where_there_is_no_arrival_draw():
    closed = config_data()
    closed["workload"] = {"isl": 1024, "osl": 128, "concurrency": 8, "num_request_ratio": 10, "arrival_seed": 3}
    rejected(closed, "workload.arrival_seed", "has no arrival draw")
    trace = config_data()
    trace["workload"] = {"trace_path": str(REPO / "data" / "traces" / "mooncake_synthetic_trace.jsonl"), "arrival_seed": 3}
    rejected(trace, "workload.arrival_seed", "a trace workload")


def test_a_finish_share_replays_in_order_and_stops_once_every_other_branch_is_done():
    # Our own control flow only: a fake replayer that records what it was asked, and a fake clock of the
    # other branches (searching for the first two checks).
    from spica_lib.run.jobs.finish_share import share_replays

    planned = {f"k{d}#{i}": None for d in range(3) for i in range(2)}
    asked, checks = [], iter([True, True, False])

    def fake_replay(batch):
        asked.append(list(batch))
        yield from ((name, None) for name in batch)

    done, why = share_replays(planned, lambda: next(checks), fake_replay, width=2)
    assert asked == [["k0#0", "k0#1"], ["k1#0", "k1#1"]] and done == ["k0#0", "k0#1", "k1#0", "k1#1"]
    assert why.startswith("every other branch told its last round") and "other 2" in why
    done, why = share_replays(planned, lambda: False, fake_replay, width=2)  # the branch that ends last
    assert done == [] and why.startswith("every other branch had told its last round")
    done, why = share_replays(planned, lambda: True, fake_replay, width=4)
    assert done == list(planned) and why == "replayed all 6 while another branch searched"


# Real sweeps (real Vizier and Dynamo replays).


def run_sweep(tmp_path, data):
    path = write_yaml(tmp_path, data)
    done = subprocess.run([*SPICA, str(path)], cwd=tmp_path, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    return next((tmp_path / "results").iterdir()), done.stdout


@pytest.mark.slow
def test_a_sweep_finishes_on_fresh_samples_disjoint_from_its_own_and_recommends_the_fewest_gpus_among_equivalents(tmp_path):
    data = yaml.safe_load((REPO / "config" / "examples" / "pinned_parallel.yaml").read_text())
    # Light traffic: 3 and 4 single-GPU replicas serve it alike, so on goodput they are equivalent and 3 GPUs win.
    data["search_space"]["parallel_configs"] = [{"tp": 1, "replicas": 4}, {"tp": 1, "replicas": 3}]
    data["workload"] = {"isl": 1024, "osl": 128, "request_rate": 2.0, "num_request_ratio": 20, "arrival_seed": 7}
    data["goal"] = {"target": "goodput", "sla": {"ttft_ms": 2000, "itl_ms": 50}}
    data["sweep"].update(max_rounds=1, candidates_per_round=2, finish_top=2, finish_samples=4, baselines=False)
    run, stdout = run_sweep(tmp_path, data)
    trials = [json.loads(p.read_text()) for p in run.glob("rounds/*/*/trials/*/*.json")]
    assert len(trials) == 2
    assert {t["spec"]["replay"]["workload"]["arrival_seed"] for t in trials} == {7}  # one sample for the search
    finish = read_model(run / "finish.json", FinishResult)
    seeds = [[s.arrival_seeds[""] for s in d.samples] for d in finish.deployments]
    shared = min(len(seeds[0]), len(seeds[1]))  # the recommendation may get more, for its level's precision
    assert seeds[0][:shared] == seeds[1][:shared] and shared >= 4  # paired
    assert len(set(seeds[0] + seeds[1])) == max(map(len, seeds)) and 7 not in seeds[0] + seeds[1]  # fresh
    assert all(s.replayed for d in finish.deployments for s in d.samples)
    ranked = pd.read_csv(run / "ranked.csv")
    top = ranked.head(2)
    assert bool(top["recommended"].iloc[0]) and list(top["verdict"]) == ["equivalent", "equivalent"]
    assert list(top["config_replicas"]) == [3, 4]  # shown within the margin: the fewer GPUs
    summary = read_model(run / "summary.json", SweepSummary)
    by_key = finish.by_key()
    assert summary.best_score == pytest.approx(by_key[top["key"].iloc[0]].mean)  # the fresh mean, not the search's
    assert summary.search_best_score == pytest.approx(ranked["score"].max())
    assert summary.finish_note.startswith("#1 is within ") and "uses 1 GPU fewer than #2" in summary.finish_note
    assert summary.best_value == pytest.approx(summary.best_score) and summary.unit == "tok/s"
    assert summary.sla_coverage == pytest.approx(by_key[top["key"].iloc[0]].metric_mean("sla_coverage"))
    assert "on the search's sample" in stdout and summary.finish_note in stdout
    report = (run / "report" / "report.md").read_text()
    assert "### On fresh traffic samples" in report and summary.finish_note in report


@pytest.mark.slow
def test_a_kv_router_deployment_on_a_closed_loop_is_repeated_and_round_robin_stands_without_a_replay(tmp_path):
    data = yaml.safe_load((REPO / "config" / "examples" / "pinned_parallel.yaml").read_text())
    data["search_space"]["parallel_configs"] = [{"tp": 2, "replicas": 2}]
    # The router is the only setting with two values, so the round's two candidates are one of each. With the KV
    # router's knobs free, the optimizer proposed two KV routers (the round robin was never tested), and once in
    # three suites two whose knobs changed nothing on this traffic: the finish then rightly saw one deployment.
    # Half of each prompt shared within 4 groups makes the KV router's choices its own: at temperature 0 it routes a
    # request to the worker holding its prefix (mean TTFT 78-106 ms in 6 runs by hand, round robin's 132 ms).
    # Without shared prefixes it only balances load, and at 8 in flight on 2 workers it replayed, now and then, to
    # exactly the round robin's metrics (at temperature 0 or 1): the finish then rightly saw one deployment.
    data["search_space"] = narrowed(
        data["search_space"], router_mode=["kv_router", "round_robin"], agg_max_num_batched_tokens=[8192],
        agg_max_num_seqs=[256], overlap_score_credit=[0.5], prefill_load_scale=[4.0], router_temperature=[0.0],
    )  # fmt: skip
    data["workload"] = {"isl": 1024, "osl": 128, "concurrency": 8, "num_request_ratio": 6, "shared_prefix_ratio": 0.5,
                        "num_prefix_groups": 4}  # fmt: skip
    data["goal"] = {"target": "throughput_per_gpu"}
    data["sweep"].update(max_rounds=1, candidates_per_round=2, finish_top=2, finish_samples=3, baselines=False)
    run, _ = run_sweep(tmp_path, data)
    finish = read_model(run / "finish.json", FinishResult)
    records = {json.loads(p.read_text())["key"]: json.loads(p.read_text()) for p in run.glob("rounds/*/*/trials/*/*.json")}
    trials = [(r["spec"]["replay"]["plan"]["router_mode"], r["result"]["status"], r["result"]["reason"]) for r in records.values()]
    assert sorted(router for router, _, _ in trials) == ["kv_router", "round_robin"], trials
    assert finish.kind == "repeat" and len(finish.deployments) == 2, trials
    for d in finish.deployments:
        router = records[d.key]["spec"]["replay"]["plan"]["router_mode"]
        assert all(s.replayed == (router == "kv_router") for s in d.samples)
        if router == "round_robin":
            assert d.scores == [d.search_score] * len(d.samples)  # an exact replay on unchanging traffic: it stands


@pytest.mark.slow
def test_a_minimised_target_tells_every_miss_worse_than_every_feasible_trial_and_prints_the_latency_positive(tmp_path):
    from spica_lib.search.history import BranchHistory

    data = yaml.safe_load((REPO / "config" / "examples" / "pinned_parallel.yaml").read_text())
    # One TP1 worker drowns at 12 req/s and misses the p90 TTFT bound; the wider layouts meet it.
    data["search_space"]["parallel_configs"] = [{"tp": 1, "replicas": 1}, {"tp": 2, "replicas": 2}, {"tp": 4, "replicas": 2}]
    data["workload"] = {"isl": 2048, "osl": 128, "request_rate": 12.0, "num_request_ratio": 10}
    data["goal"] = {"target": "e2e_latency", "sla": {"ttft_ms": 1500, "percentile": 90}}
    data["sweep"].update(max_rounds=1, candidates_per_round=3, finish_top=2, finish_samples=2, baselines=False)
    run, stdout = run_sweep(tmp_path, data)
    history = read_model(next(run.glob("rounds/agg/0/observations.json")), BranchHistory)
    feasible = [o.metrics["objective"] for o in history.observations if o.status == "feasible"]
    missed = [o.metrics["objective"] for o in history.observations if o.status != "feasible" and o.metrics]
    assert feasible and missed, [(o.status, o.reason) for o in history.observations]
    assert max(missed) < min(feasible)  # the designer sees every miss below every feasible latency
    trials = {json.loads(p.read_text())["key"]: json.loads(p.read_text())["result"] for p in run.glob("rounds/*/*/trials/*/*.json")}
    by_latency = sorted((r["metrics"]["mean_e2e_latency_ms"], o.metrics["objective"]) for o in history.observations
                        if o.status == "feasible" for k, r in trials.items() if k == o.key)  # fmt: skip
    assert [objective for _, objective in by_latency] == sorted((objective for _, objective in by_latency), reverse=True)
    summary = read_model(run / "summary.json", SweepSummary)
    latency = -summary.best_score
    assert latency > 0 and f"best e2e_latency {latency:.4g} ms" in stdout
    assert (summary.best_value, summary.unit) == (pytest.approx(latency), "ms")  # the goal's unit, positive


@pytest.mark.slow
def test_a_trace_with_a_holdout_is_searched_without_it_and_the_finish_checks_the_answer_on_it(tmp_path, monkeypatch):
    from spica_lib.traces.scan import scan_trace

    monkeypatch.setenv("SPICA_TRACE_SPLITS", str(tmp_path / "splits"))
    data = yaml.safe_load((REPO / "config" / "examples" / "trace.yaml").read_text())
    data["workload"] = {"trace_path": str(REPO / "data" / "traces" / "mooncake_synthetic_trace.jsonl"), "holdout": 0.25}
    data["search_space"] = narrowed(
        data["search_space"], deployment_mode=["agg"], router_mode=["round_robin"], planner_scaling_policy=["disabled"],
        gpu_budget=16, parallel_configs=[{"tp": 2, "replicas": 4}, {"tp": 4, "replicas": 2}, {"tp": 2, "replicas": 8}],
    )  # fmt: skip
    # A loose TTFT bound: the smaller layouts' mean TTFT is over 20 s, which a 10 s bound's screen rules out.
    data["goal"] = {"target": "goodput_per_gpu", "sla": {"ttft_ms": 30000, "itl_ms": 100}}
    data["sweep"] = {"max_rounds": 1, "candidates_per_round": 3, "parallel_evals": 2, "finish_top": 3, "baselines": False}
    run, stdout = run_sweep(tmp_path, data)
    splits = {p.name: scan_trace(p) for p in (tmp_path / "splits").glob("*/*.jsonl")}
    search, held = splits["search.jsonl"], splits["holdout.jsonl"]
    assert search.records + held.records == scan_trace(data["workload"]["trace_path"]).records
    trials = [json.loads(p.read_text()) for p in run.glob("rounds/*/*/trials/*/*.json")]
    assert len(trials) == 3
    for trial in trials:  # the search replays only the part before the cut
        assert trial["spec"]["trace_sha256"] == search.sha256
        assert trial["result"]["metrics"]["completed_requests"] <= search.records
    finish = read_model(run / "finish.json", FinishResult)
    reasons = [t["result"]["reason"] for t in trials]
    assert finish.kind == "holdout" and finish.looks == [1] and len(finish.deployments) == 3, reasons  # one replay each
    assert all(len(d.samples) == 1 for d in finish.deployments)
    summary = read_model(run / "summary.json", SweepSummary)
    assert summary.finish_kendall_tau is not None and summary.finish_meets_sla is not None
    assert "held-out check: Kendall's tau" in stdout
    assert "Held-out check: Kendall's tau" in (run / "report" / "report.md").read_text()
