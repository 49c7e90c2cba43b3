"""The early stops' rules on hand-made ticks (real replays are in test_trial_replay.py).

Each case is one the prefix screen got wrong (issue 38): it judged a percentile or a median by the
mean, made a goodput target's mean bound a hard limit, stopped a heavy prefix whose rest was light,
called a trace whose first part of time held few requests hopeless, and integrated a queue that
drained and refilled between long ticks. A stop here needs a bound that holds whatever the rest does.
"""

import json
import time

import pytest
from conftest import build, config_data

from spica_lib.replay.early_stop import (
    EarlyStopWatch,
    ReplayStopped,
    coverage_misses_allowed,
    percentile_misses_needed,
)
from spica_lib.replay.stall import prefix_stall
from spica_lib.trial.screen import screen_plan


def rules(requests=100, bounds=(("p90_ttft_ms", 1000.0),), percentile=None, coverage=None, prune=None, prefix=None):
    return {"requests": requests, "bounds": [list(b) for b in bounds], "percentile": percentile, "coverage": coverage,
            "prune": prune, "prefix_requests": prefix, "prefix": f"first {prefix} of {requests} requests",
            "fraction": (prefix or 0) / requests}  # fmt: skip


def done(*ttfts, arrived=0):
    """A tick's traffic: requests that completed in the window with these TTFTs (ms), and arrivals."""
    count = len(ttfts)
    return {"num_req": arrived, "ttft_count": count, "avg_ttft_ms": sum(ttfts) / count if count else 0.0}


def feed(watch, ticks):
    """ticks: (now_ms, traffic, queued_prefill)."""
    for now, traffic, queued in ticks:
        watch.on_tick(now, traffic, queued)


def test_the_counts_that_decide_a_percentile_and_a_coverage_floor():
    assert percentile_misses_needed(100, 90) == 11  # 89 of the sorted 0..99 within: p90 interpolates 89..90
    assert percentile_misses_needed(100, 50) == 51
    assert percentile_misses_needed(1000, 99) == 11
    assert coverage_misses_allowed(200, 0.99) == pytest.approx(2.0)


def test_a_p90_bound_is_judged_by_the_requests_past_it_not_by_a_mean_a_heavy_tail_drags_up():
    # The prefix: p90 200 ms, mean 2090 ms (one request of 19.1 s), against a p90 bound of 1000 ms.
    watch = EarlyStopWatch(rules(percentile=90))
    ticks = [(1000.0 * (i + 1), done(200.0, arrived=1), 0) for i in range(9)]
    feed(watch, [*ticks, (30_000.0, done(19_100.0, arrived=1), 0)])  # mean of the ten: 2090 ms; one past 1000
    # Ten more over the bound make 11 of 100: the p90 can no longer come back under it.
    feed(watch, [(31_000.0 + 1000 * i, done(1500.0, arrived=1), 0) for i in range(9)])
    with pytest.raises(ReplayStopped) as stop:
        watch.on_tick(41_000.0, done(1500.0, arrived=1), 0)
    found = stop.value.stop
    assert found["rule"] == "percentile" and found["certain_misses"] == 11 == found["limit"]
    assert found["metric"] == "p90_ttft_ms" and found["at_sim_ms"] == 41_000.0
    assert found["partial_metrics"]["completed_requests"] == 20 and "mean_ttft_ms" not in found  # partial names only


def test_a_median_bound_is_not_stopped_on_a_prefix_whose_median_is_under_it():
    watch = EarlyStopWatch(rules(bounds=[("median_ttft_ms", 500.0)], percentile=50))
    # 20 completed, median 300 ms, mean 1040 ms (a few very slow ones): a mean-judged screen stopped this.
    feed(watch, [(1000.0 * (i + 1), done(300.0 if i % 5 else 4000.0, arrived=1), 0) for i in range(20)])
    assert watch.completed == 20  # no stop: 4 certain misses, 51 needed


def test_waiting_requests_count_only_when_they_cannot_all_be_younger_than_the_bound():
    watch = EarlyStopWatch(rules(bounds=[("median_ttft_ms", 500.0)], percentile=50))
    feed(watch, [(1000.0 * (i + 1), done(300.0 if i % 5 else 4000.0, arrived=1), 0) for i in range(20)])
    watch.on_tick(20_100.0, done(arrived=47), 47)  # 47 waiting, all arrived in the last 100 ms: none certain
    with pytest.raises(ReplayStopped) as stop:
        watch.on_tick(20_700.0, done(arrived=0), 47)  # 600 ms later they are all past 500 ms: 4 + 47 = 51
    assert stop.value.stop["rule"] == "percentile" and stop.value.stop["certain_misses"] == 51


def test_a_queue_that_drains_and_refills_between_long_ticks_proves_nothing():
    # A light replay ticks every 60 s: 50 waiting at both ends, but all 50 now arrived in the last second.
    watch = EarlyStopWatch(rules(bounds=[("p90_ttft_ms", 2000.0)], percentile=90, requests=100))
    watch.on_tick(1000.0, done(arrived=50), 50)
    watch.on_tick(61_000.0, done(*[100.0] * 50, arrived=50), 50)  # the first 50 completed fast; 50 new just came
    assert watch.completed == 50  # not stopped (a time integral of the queue would say 50 x 60 s waited)


def test_a_mean_bound_under_a_goodput_target_never_stops_a_replay_without_a_bar():
    # Mean TTFT 2.5x its bound, but 75 % of requests meet the SLA: goodput counts them; nothing is certain.
    watch = EarlyStopWatch(rules(bounds=[("mean_ttft_ms", 1000.0), ("mean_itl_ms", 50.0)]))
    ticks = [(1000.0 * (i + 1), done(500.0 if i % 4 else 8500.0, arrived=1), 0) for i in range(100)]
    feed(watch, ticks)
    assert watch.completed == 100 and watch._ttft_sum / 100 == pytest.approx(2500.0)


def prune(below, osl=100, gpus=4, span_ms=0.0):
    return {"below": below, "rank": 5, "gpus": gpus, "output_tokens": osl * 100, "osl": osl, "span_ms": span_ms}


def test_a_goodput_trial_is_pruned_only_once_its_optimistic_score_is_below_the_bar():
    # 100 requests of 100 output tokens on 4 GPUs, arrivals over 100 s: at best 10,000 tokens / 100 s / 4 = 25.
    ticks = [(1000.0 * (i + 1), done(500.0 if i % 4 else 8500.0, arrived=1), 0) for i in range(40)]
    kept = EarlyStopWatch(rules(bounds=[("mean_ttft_ms", 1000.0)], prune=prune(below=20.0, span_ms=100_000.0)))
    feed(kept, ticks)  # 10 certain misses by 40 s: at most 9,000 tokens / 100 s / 4 = 22.5 >= 20
    assert kept.completed == 40
    pruned = EarlyStopWatch(rules(bounds=[("mean_ttft_ms", 1000.0)], prune=prune(below=23.0, span_ms=100_000.0)))
    with pytest.raises(ReplayStopped) as stop:
        feed(pruned, ticks)
    found = stop.value.stop
    assert found["rule"] == "prune" and found["score_bound"] < 23.0 and found["below"] == 23.0 and found["rank"] == 5
    assert found["certain_misses"] == 9  # (10,000 - 9 x 100 tokens) / 100 s / 4 GPUs = 22.75 (8 misses: 23.0)
    assert found["score_bound"] == pytest.approx(22.75) and found["at_sim_ms"] == 33_000.0


def test_a_replay_still_running_past_the_trace_is_pruned_by_its_duration_alone():
    # No certain miss at all; but it is still running at 200 s, so its goodput is at most 10,000 / 200 / 4 = 12.5.
    watch = EarlyStopWatch(rules(bounds=[("mean_ttft_ms", 10_000.0)], prune=prune(below=13.0, span_ms=100_000.0)))
    watch.on_tick(150_000.0, done(100.0, arrived=100), 0)
    with pytest.raises(ReplayStopped) as stop:
        watch.on_tick(200_000.0, done(100.0), 0)
    assert stop.value.stop["score_bound"] == pytest.approx(12.5) and stop.value.stop["certain_misses"] == 0


def test_a_coverage_floor_stops_once_more_requests_certainly_miss_than_it_allows():
    # 99 % of 200 must meet the SLA: 2 may miss. Mean 300 ms is far under the bound; a mean screen saw nothing.
    watch = EarlyStopWatch(rules(requests=200, bounds=[("mean_ttft_ms", 2000.0)], coverage=0.99))
    feed(watch, [(1000.0 * (i + 1), done(100.0, arrived=1), 0) for i in range(50)])
    watch.on_tick(50_500.0, done(5000.0, arrived=1), 0)
    watch.on_tick(51_000.0, done(5000.0, arrived=1), 0)  # 2 misses: still allowed
    with pytest.raises(ReplayStopped) as stop:
        watch.on_tick(51_500.0, done(5000.0, arrived=1), 0)
    found = stop.value.stop
    assert found["rule"] == "coverage" and found["certain_misses"] == 3 and found["limit"] == pytest.approx(2.0)


def test_an_end_to_end_bound_counts_every_request_not_yet_completed_that_arrived_long_enough_ago():
    watch = EarlyStopWatch(rules(requests=100, bounds=[("p90_e2e_latency_ms", 10_000.0)], percentile=90))
    watch.on_tick(1000.0, done(arrived=30), 0)
    watch.on_tick(5000.0, done(arrived=10), 0)
    with pytest.raises(ReplayStopped) as stop:
        watch.on_tick(12_000.0, done(), 0)  # the 30 of the first second have waited 11 s: 30 over 10 s
    assert stop.value.stop["certain_misses"] == 30


SLA_BOUNDS = (("mean_ttft_ms", 1000.0), ("mean_itl_ms", 50.0))


def test_a_request_past_its_deadline_misses_the_sla_whatever_queue_it_waits_in():
    # 20 requests arrive in the first second and wait in a decode queue (no prefill queue to count them by).
    # Each must be done 1 s + (n - 1) x 50 ms after its arrival: 10 arrive at 1 s and ask for 21 tokens
    # (due by 3 s on the trace's clock), 10 for 101 (due by 7 s).
    deadlines = sorted([1000.0 + 1000.0 + 20 * 50.0] * 10 + [1000.0 + 1000.0 + 100 * 50.0] * 10)
    watch = EarlyStopWatch({**rules(requests=20, bounds=SLA_BOUNDS, coverage=0.8), "deadlines_ms": deadlines})
    watch.on_tick(1000.0, done(arrived=20), 0)
    watch.on_tick(2999.0, done(), 0)  # none past its deadline yet
    with pytest.raises(ReplayStopped) as stop:  # one is done (in time, for all the ticks say): 9 of 10 are late
        watch.on_tick(3001.0, done(500.0), 0)  # 80 % of 20: 4 may miss
    found = stop.value.stop
    assert found["rule"] == "coverage" and found["metric"] == "sla" and found["certain_misses"] == 9


def test_a_late_request_is_counted_once_even_when_it_also_missed_its_ttft():
    # Completed misses and late requests not completed are disjoint; a late count never goes back.
    watch = EarlyStopWatch({**rules(requests=100, bounds=SLA_BOUNDS), "deadlines_ms": [5000.0] * 10 + [9e9] * 90})
    watch.on_tick(1000.0, done(arrived=100), 0)
    watch.on_tick(6000.0, done(5500.0, 5500.0), 0)  # 2 done with TTFT over 1 s (both certain misses)
    assert watch._sla_misses == 2 + (10 - 2)  # the 2 may be among the 10 late ones: 8 late are not done
    watch.on_tick(7000.0, done(100.0, 100.0, 100.0, 100.0), 0)  # 6 done: the late ones left could be 4
    assert watch._sla_misses == 10


def test_one_deadline_after_arrival_holds_for_every_request_of_a_synthetic_workload():
    # A synthetic workload has no clock of its own: arrivals are counted by the ticks, one deadline for all.
    watch = EarlyStopWatch({**rules(requests=100, bounds=SLA_BOUNDS, coverage=0.9), "deadline_ms": 5000.0})
    watch.on_tick(1000.0, done(arrived=30), 0)
    watch.on_tick(5999.0, done(), 0)  # arrived by 1 s, due by 6 s: not yet past
    with pytest.raises(ReplayStopped) as stop:
        watch.on_tick(6001.0, done(arrived=10), 0)
    assert stop.value.stop["certain_misses"] == 30


def test_without_an_itl_bound_there_is_no_deadline_and_a_decode_queue_proves_nothing():
    watch = EarlyStopWatch(rules(requests=100, bounds=[("mean_ttft_ms", 1000.0)], coverage=0.9))
    feed(watch, [(1000.0 * (i + 1), done(arrived=10), 0) for i in range(10)])  # 100 waiting, none in prefill
    assert watch.arrived == 100 and watch._sla_misses == 0


def test_a_goodput_trial_whose_requests_are_all_late_is_pruned_on_its_deadlines():
    # 100 requests of 100 tokens, 4 GPUs, a 100 s trace: at best 25 per GPU. 90 late by 50 s leave at most
    # 10 x 100 tokens / 100 s / 4 = 2.5 < 3.
    rule = {**rules(requests=100, bounds=SLA_BOUNDS, prune=prune(below=3.0, span_ms=100_000.0)),
            "deadlines_ms": [10_000.0] * 90 + [9e9] * 10}  # fmt: skip
    watch = EarlyStopWatch(rule)
    watch.on_tick(1000.0, done(arrived=100), 0)
    with pytest.raises(ReplayStopped) as stop:
        watch.on_tick(50_000.0, done(), 0)
    assert stop.value.stop["rule"] == "prune" and stop.value.stop["certain_misses"] == 90


def test_an_itl_bound_is_never_a_reason_to_stop():
    watch = EarlyStopWatch(rules(bounds=[("p90_itl_ms", 1.0)], percentile=90))
    feed(watch, [(1000.0 * (i + 1), done(9e6, arrived=1), 10**6) for i in range(50)])  # nothing bounds the ITL
    assert watch.completed == 50


def test_a_heavy_prefix_is_no_verdict_it_is_only_the_checkpoint_that_paces_the_rest():
    # The first 20 requests (the prefix) each take 3x the bound, the other 80 are fast: a prefix screen stopped it.
    told = []
    watch = EarlyStopWatch(rules(bounds=[("mean_ttft_ms", 1000.0)], prefix=20), on_checkpoint=told.append)
    feed(watch, [(1000.0 * (i + 1), done(3000.0 if i < 20 else 200.0, arrived=1), 0) for i in range(100)])
    assert watch.completed == 100
    (checkpoint,) = told
    assert checkpoint["completed"] == 20 and checkpoint["at_sim_ms"] == 20_000.0 and checkpoint["cpu_seconds"] >= 0


def trace(path, stamps):
    path.write_text("".join(json.dumps({"timestamp": s, "input_length": 512, "output_length": 8,
                                        "hash_ids": [i]}) + "\n" for i, s in enumerate(stamps)))  # fmt: skip
    return path


def test_a_light_then_heavy_trace_is_paced_by_its_first_requests_not_by_its_first_part_of_time(tmp_path):
    # 250 requests: 10 over the first 80 % of the span, 240 in the last 20 %. The first 20 % of its time
    # holds 3 of them, not the 50 that `fraction x records` counted; nothing had finished there, and it
    # was screened as "no request finished". Now the prefix is its first 50 requests, and its share of
    # the time limit is theirs: 20 % of the work.
    stamps = [i * 16_000 for i in range(10)] + [160_000 + i * 166 for i in range(240)]
    data = config_data(workload={"isl": None, "osl": None, "request_rate": None, "num_request_ratio": None,
                                 "trace_path": str(trace(tmp_path / "t.jsonl", stamps))})  # fmt: skip
    data["goal"] = {"target": "goodput", "sla": {"ttft_ms": 1000, "itl_ms": 50}}
    plan = screen_plan(build(data), None)
    assert plan.requests == 50 and plan.fraction == pytest.approx(0.2) and plan.prefix == "first 50 of 250 requests"
    watch = EarlyStopWatch(rules(requests=250, bounds=plan.bounds, prefix=plan.requests))
    feed(watch, [(16_000.0 * (i + 1), done(arrived=1), 0) for i in range(3)])  # 20 % of its time: nothing done
    assert watch.checkpoint is None and watch.completed == 0  # not stopped: nothing is certain
    stall = prefix_stall(100.0, {**rules(requests=250, prefix=plan.requests), "fraction": plan.fraction})
    assert stall.cpu_seconds == pytest.approx(20.0)  # its share of the limit is the prefix's share of the requests


def test_the_rounds_prune_bar_is_the_kth_best_of_the_history_told_before_it_and_nothing_else():
    from spica_lib.search.history import BranchHistory, Observation
    from spica_lib.search.rounds import prune_bar
    from spica_lib.trial.spec import TrialResult

    cfg = build(config_data(goal={"target": "goodput_per_gpu", "sla": {"ttft_ms": 2000, "itl_ms": 50}}))
    scores = {f"k{i}": float(s) for i, s in enumerate([50, 10, 40, 30, 20, 60, 5])}
    results = {key: TrialResult(status="feasible", score=s, used_gpus=1) for key, s in scores.items()}
    results["bad"] = TrialResult(status="infeasible", used_gpus=1)

    def told(*keys, status="feasible"):
        return [Observation(vizier_id=i, round=0, params={}, key=k, status=status) for i, k in enumerate(keys)]

    history = BranchHistory(deployment_mode="agg", round=0,
                            observations=told("k0", "k1", "k2", "k3") + told("k0", status="cache_hit"))  # fmt: skip
    assert prune_bar(cfg, history, results) is None  # 4 distinct feasible trials: no 5th best yet
    history.observations += told("k4", "bad")
    bar = prune_bar(cfg, history, results)
    assert bar.below == 10.0 and bar.rank == 5  # 50, 40, 30, 20, 10: the 5th
    # Results the round's own trials (or a round in flight) produce are not in its history: no effect.
    assert prune_bar(cfg, history, {**results, "k5": results["k5"], "k6": results["k6"]}) == bar
    assert prune_bar(build(config_data(goal={"target": "throughput"})), history, results) is None  # no goodput


def test_the_prune_bar_counts_the_other_branches_told_trials_as_one_ranking():
    from spica_lib.search.history import BranchHistory, Observation
    from spica_lib.search.rounds import prune_bar, rival_scores
    from spica_lib.trial.spec import TrialResult

    cfg = build(config_data(goal={"target": "goodput_per_gpu", "sla": {"ttft_ms": 2000, "itl_ms": 50}}))

    def told(mode, round_index, scores, status="feasible"):
        results = {f"{mode}{i}": TrialResult(status=status, score=s, used_gpus=1) for i, s in enumerate(scores)}
        observations = [Observation(vizier_id=i, round=0, params={}, key=k, status=status, trial_round=0,
                                    trial_batch=0) for i, k in enumerate(results)]  # fmt: skip
        return BranchHistory(deployment_mode=mode, round=round_index, observations=observations), results

    own, own_results = told("disagg", 1, [0.3, 0.5, 30.0])
    agg, agg_results = told("agg", 0, [110.0, 54.0, 22.0, 1.0])
    assert prune_bar(cfg, own, own_results) is None  # 3 of its own: no 5th best of the branch alone
    rivals = rival_scores([agg], agg_results)
    bar = prune_bar(cfg, own, own_results, rivals)
    # 110, 54, 30, 22, 1: the sweep's 5th (a disagg trial below it cannot be among the sweep's top 5)
    assert bar.below == 1.0 and bar.rank == 5 and bar.told == {"agg": 0, "disagg": 1}
    # Only what another branch told feasible counts: its infeasible or pruned trials are no score to beat.
    pruned, pruned_results = told("agg", 0, [500.0, 400.0], status="pruned")
    assert rival_scores([pruned], pruned_results).outcomes == {}
    assert prune_bar(cfg, own, own_results, rival_scores([pruned], pruned_results)) is None
    # A trial told with a result that is missing (its file not read) is not counted either.
    assert rival_scores([agg], {}).outcomes == {}


def test_the_prune_bar_counts_distinct_outcomes_as_the_finish_does_so_twins_never_fill_its_places():
    from spica_lib.search.history import BranchHistory, Observation
    from spica_lib.search.rounds import prune_bar
    from spica_lib.trial.spec import TrialResult

    cfg = build(config_data(goal={"target": "goodput_per_gpu", "sla": {"ttft_ms": 2000, "itl_ms": 50}}))
    # 100, 100, 90, 90, 80: two pairs of twins (a knob that did not bind), one up to float noise. The finish sees
    # three distinct deployments, so the 5th best distinct does not exist yet and a trial scoring 70, the finish's
    # 4th distinct deployment, must not be stopped.
    scores = [100.0, 100.0, 90.0, 90.0 * (1 + 1e-15), 80.0]
    results = {f"k{i}": TrialResult(status="feasible", score=s, used_gpus=2, metrics={"mean_ttft_ms": s})
               for i, s in enumerate(scores)}  # fmt: skip
    observations = [Observation(vizier_id=i, round=0, params={}, key=k, status="feasible") for i, k in enumerate(results)]
    history = BranchHistory(deployment_mode="agg", round=0, observations=observations)
    assert prune_bar(cfg, history, results) is None
    # Twins are one deployment only when everything they served is the same: other metrics make them distinct.
    results["k1"] = TrialResult(status="feasible", score=100.0, used_gpus=2, metrics={"mean_ttft_ms": 1.0})
    results["k3"] = TrialResult(status="feasible", score=90.0, used_gpus=1, metrics={"mean_ttft_ms": 90.0})
    assert prune_bar(cfg, history, results).below == 80.0


def _ticks_of(watch_rules, completions_per_window=5, windows=12):
    """The tick lengths a watch asks for when each window closes with `completions_per_window` requests done."""
    from spica_lib.replay.progress import ProgressWatch

    progress = ProgressWatch(1000, None, None, EarlyStopWatch(watch_rules))
    now, asked = 0.0, []
    for _ in range(windows):
        traffic = done(*[100.0] * completions_per_window, arrived=completions_per_window)
        reply = progress.on_tick({"now_ms": now, "traffic": traffic})
        asked.append(reply["next_tick_ms"] - now)
        now = reply["next_tick_ms"]
    return asked


def test_ticks_are_fine_only_where_a_rule_can_stop_the_replay():
    # A goodput target with mean bounds and no bar yet (round 0): nothing can stop it, so the ticks grow as the
    # replay is cheap (they cost CPU in Dynamo's snapshots), whatever completes in a window.
    free = rules(requests=1000, bounds=[("mean_ttft_ms", 1000.0), ("mean_itl_ms", 50.0)])
    assert not EarlyStopWatch(free).judges
    coarse = _ticks_of(free)
    assert coarse[-1] > 8 * coarse[0]
    # With a bar (or a hard constraint), a window's TTFT sum must bound its requests one by one: the ticks
    # shrink toward one completion each.
    barred = {**free, "prune": prune(below=20.0, span_ms=100_000.0)}
    hard = rules(requests=1000, bounds=[("p90_ttft_ms", 1000.0)], percentile=90)
    for judged in (barred, hard):
        assert EarlyStopWatch(judged).judges
        fine = _ticks_of(judged)
        assert fine[-1] < coarse[0] and fine[-1] < fine[0]


def test_a_planner_is_charged_the_gpu_seconds_it_held_and_one_worker_of_each_role_for_the_rest():
    # One 2-GPU decode worker at the least (an agg planner's workers count as decode); 100 requests over 100 s.
    planner = {**prune(below=38.0, gpus=2, span_ms=100_000.0), "worker_gpus": {"prefill": 0, "decode": 2}}
    watch = EarlyStopWatch(rules(bounds=[("mean_ttft_ms", 1000.0)], prune=planner))
    watch.on_tick(0.0, done(), 0, workers=(0, 1))
    watch.on_tick(10_000.0, done(arrived=10), 0, workers=(0, 4))  # nothing had arrived: the duration had not begun
    watch.on_tick(20_000.0, done(arrived=10), 0, workers=(0, 4))  # 4 workers held throughout: 8 GPUs x 10 s
    watch.on_tick(30_000.0, done(arrived=10), 0, workers=(0, 1))  # scaled down some time in between: 2 GPUs x 10 s
    # 100 GPU-seconds seen over 20 s, and the 80 s left of the trace's span at 2 GPUs at the least.
    assert watch._gpu_seconds(100_000.0) == pytest.approx(8 * 10 + 2 * 10 + 2 * 80)
    assert watch.completed == 0  # 10,000 tokens / 260 GPU-s = 38.5: not below 38
    higher = EarlyStopWatch(rules(bounds=[("mean_ttft_ms", 1000.0)], prune={**planner, "below": 39.0}))
    with pytest.raises(ReplayStopped) as stop:
        for now, arrived, held in ((0.0, 0, 1), (10_000.0, 10, 4), (20_000.0, 10, 4), (30_000.0, 10, 1)):
            higher.on_tick(now, done(arrived=arrived), 0, workers=(0, held))
    assert stop.value.stop["rule"] == "prune" and stop.value.stop["score_bound"] == pytest.approx(10_000 / 260)
    # Without the planner's counts (no worker_gpus), only its one worker for the whole span: 10,000 / 200 = 50.
    fewest = EarlyStopWatch(rules(bounds=[("mean_ttft_ms", 1000.0)], prune={**planner, "worker_gpus": None}))
    assert fewest._gpu_seconds(100_000.0) == pytest.approx(200.0)


def test_a_rounds_prefix_budget_is_three_times_the_slowest_prefix_told_before_it_with_a_floor():
    from spica_lib.replay.request import PaceCheckpoint
    from spica_lib.replay.stall import STALL_FLOOR_SECONDS
    from spica_lib.search.history import BranchHistory, Observation
    from spica_lib.search.rounds import prefix_budget, rival_scores
    from spica_lib.trial.spec import TrialResult

    def told(mode, prefixes, status="feasible"):
        results = {}
        for i, cpu in enumerate(prefixes):
            checkpoint = None if cpu is None else PaceCheckpoint(prefix="p", completed=1, at_sim_ms=1.0,
                                                                 replay_seconds=cpu, cpu_seconds=cpu)  # fmt: skip
            results[f"{mode}{i}"] = TrialResult(status=status, score=1.0, used_gpus=1, checkpoint=checkpoint)
        observations = [Observation(vizier_id=i, round=0, params={}, key=k, status=status) for i, k in enumerate(results)]
        return BranchHistory(deployment_mode=mode, round=0, observations=observations), results

    assert prefix_budget(None, {}) is None  # round 0: nothing told yet, the share of max_eval_seconds alone
    own, own_results = told("disagg", [1.0, 2.4, None])  # a replay timed out before its checkpoint tells nothing
    assert prefix_budget(own, own_results) == pytest.approx(3 * 2.4)
    agg, agg_results = told("agg", [4.0], status="pruned")  # whatever became of it, its prefix ran at that pace
    assert prefix_budget(own, own_results, rival_scores([agg], agg_results)) == pytest.approx(12.0)
    # The budget never goes under the floor, nor past the prefix's share of max_eval_seconds.
    base = {**rules(requests=1000, prefix=200), "fraction": 0.2}
    assert prefix_stall(120.0, base).cpu_seconds == pytest.approx(24.0)
    budgeted = prefix_stall(120.0, {**base, "prefix_seconds": 3 * 2.4})
    assert budgeted.cpu_seconds == STALL_FLOOR_SECONDS and "the round's prefix budget" in budgeted.reason
    assert prefix_stall(120.0, {**base, "prefix_seconds": 15.0}).cpu_seconds == pytest.approx(15.0)
    assert prefix_stall(120.0, {**base, "prefix_seconds": 60.0}).cpu_seconds == pytest.approx(24.0)


def test_a_replay_is_stuck_only_past_twenty_times_its_slowest_tick_and_the_floor():
    from spica_lib.replay.stall import stuck_stall

    beat = {"cpu_seconds": 5.0, "slowest_tick": 0.19, "finished": 300, "requests": 1000, "at_sim_ms": 60_000.0}
    stuck = stuck_stall(beat)
    assert stuck.cpu_seconds == pytest.approx(10.0)  # the floor: 20 x 0.19 s is under 5 s
    assert stuck.reason.startswith("stalled: no tick for 5 CPU s after 300 of 1000 requests finished (60 s")
    assert stuck_stall({**beat, "slowest_tick": 1.0}).cpu_seconds == pytest.approx(25.0)  # slow ticks by nature
    # A planner's ticks are its adjustment intervals: one over a burst may cost 100x the light ones before it.
    assert stuck_stall({**beat, "planner": True}) is None and stuck_stall({**beat, "planner": False}) is not None


def test_the_watch_beats_at_most_every_quarter_second_of_cpu_with_its_slowest_tick():
    from spica_lib.replay.progress import ProgressWatch

    beats = []
    watch = ProgressWatch(1000, 120.0, 10.0, on_beat=beats.append)
    started = time.process_time()
    for i in range(200):
        watch.on_tick({"now_ms": 100.0 * i, "traffic": done(arrived=1)})
        busy = time.process_time()
        while time.process_time() - busy < 0.005:  # 5 ms of CPU between two ticks
            pass
    spent = time.process_time() - started
    assert 1 <= len(beats) <= spent / 0.25 + 1
    assert all(b["requests"] == 1000 and 0.004 <= b["slowest_tick"] < 0.25 for b in beats)
    assert [b["cpu_seconds"] for b in beats] == sorted(b["cpu_seconds"] for b in beats)


def test_past_its_checkpoint_a_replay_is_stopped_once_its_pace_would_overrun_what_its_prefix_allows():
    from spica_lib.replay.progress import ProgressWatch, ReplayStalled

    watch = ProgressWatch(1000, 120.0, 10.0, EarlyStopWatch(rules(requests=1000, prefix=200)))
    watch.finished = 500
    watch._judge(30.0, 1_000_000.0)  # no checkpoint yet: only max_eval_seconds bounds the forecast (60 s)
    # The prefix (20 %) took 2 CPU s: the whole replay may take 2 + 3 x 10 = 32 s (the worker's pace limit).
    watch.stops.checkpoint = {"cpu_seconds": 2.0}
    watch.finished = 600
    watch._judge(19.0, 1_000_000.0)  # 31.7 s at this pace: within it
    with pytest.raises(ReplayStalled, match="at that pace the replay needs about 33 CPU s, over the 32 s its prefix"):
        watch._judge(20.0, 1_000_000.0)  # 33.3 s: it would overrun, and is stopped now rather than at 32 s


def finished(ttft, itl, tokens, arrived=0):
    """A tick's traffic as Dynamo 1.5.1 reports it: one completion with its TTFT, its own mean ITL and its tokens."""
    return {"num_req": arrived, "ttft_count": 1, "avg_ttft_ms": ttft, "itl_count": 1, "avg_itl_ms": itl,
            "shape_count": 1, "avg_osl": tokens}  # fmt: skip


PER_REQUEST_SLA = {"ttft": 1000.0, "itl": 50.0}


def test_a_completion_in_time_for_its_first_token_but_slow_after_it_misses_the_sla():
    # 20 requests, a 90 % floor: 2 may miss. Each completes with TTFT 100 ms but 80 ms between its tokens (a
    # decode worker that preempts): Dynamo's goodput does not count them, so neither does the coverage floor.
    watch = EarlyStopWatch({**rules(requests=20, bounds=SLA_BOUNDS, coverage=0.9), "sla_ms": PER_REQUEST_SLA})
    watch.on_tick(1000.0, finished(100.0, 80.0, 10, arrived=20), 0)
    watch.on_tick(2000.0, finished(100.0, 80.0, 10), 0)
    with pytest.raises(ReplayStopped) as stop:
        watch.on_tick(3000.0, finished(100.0, 80.0, 10), 0)
    assert stop.value.stop["rule"] == "coverage" and stop.value.stop["certain_misses"] == 3
    # Without the per-request bounds (a call made before them) the same ticks prove nothing.
    blind = EarlyStopWatch(rules(requests=20, bounds=SLA_BOUNDS, coverage=0.9))
    feed(blind, [(1000.0 * (i + 1), finished(100.0, 80.0, 10, arrived=20 if i == 0 else 0), 0) for i in range(3)])
    assert blind._sla_misses == 0


def long_and_short(below, deadlines=None):
    """100 requests on 1 GPU over a 100 s trace: 90 of 10 output tokens, 10 of 1,000 (10,900 tokens: at best 109)."""
    lengths = [10] * 90 + [1000] * 10
    prune = {"below": below, "rank": 5, "gpus": 1, "output_tokens": sum(lengths), "output_lengths": lengths,
             "span_ms": 100_000.0}  # fmt: skip
    due = deadlines or [9e9] * 100
    order = sorted(range(100), key=lambda i: due[i])
    return {**rules(requests=100, bounds=SLA_BOUNDS, prune=prune), "sla_ms": PER_REQUEST_SLA,
            "deadlines_ms": [due[i] for i in order], "deadline_tokens": [lengths[i] for i in order]}  # fmt: skip


def test_a_long_request_that_completed_late_takes_its_own_tokens_out_of_the_optimistic_score():
    # One request of 1,000 tokens completes with TTFT 5 s: at most 9,900 tokens can be goodput (99 per GPU). The
    # count alone knew only "1 miss", and took out the fewest tokens one request can hold (10: 108.9).
    watch = EarlyStopWatch(long_and_short(below=100.0))
    with pytest.raises(ReplayStopped) as stop:
        watch.on_tick(2000.0, finished(5000.0, 20.0, 1000, arrived=100), 0)
    assert stop.value.stop["rule"] == "prune" and stop.value.stop["score_bound"] == pytest.approx(99.0)
    kept = EarlyStopWatch(long_and_short(below=99.0))  # 99 is not below 99: it could still rank
    kept.on_tick(2000.0, finished(5000.0, 20.0, 1000, arrived=100), 0)


def test_a_window_of_two_completions_with_one_certain_miss_keeps_the_tokens_the_other_could_hold():
    # Two completions of 1,010 tokens with mean TTFT 2.5 s by 4 s: one is certainly over 1 s (the other may be the
    # 10-token one or the 1,000-token one), so up to 1,000 of their tokens may be goodput: 10,900 - 10 at best.
    watch = EarlyStopWatch(long_and_short(below=1.0))
    two = {"num_req": 100, "ttft_count": 2, "avg_ttft_ms": 2500.0, "itl_count": 2, "avg_itl_ms": 20.0,
           "shape_count": 2, "avg_osl": 505.0}  # fmt: skip
    watch.on_tick(4000.0, two, 0)
    assert watch._completed_sla == 1 and watch._goodput_tokens() == pytest.approx(10_890.0)


def test_requests_past_their_deadline_and_not_completed_hold_no_goodput_tokens():
    # The 10 long requests are due by 10 s; at 11 s none has completed. Counted, they are 10 misses of at least 10
    # tokens each (10,800 left: 108); by their tokens, at most the 900 of the short ones are left (9 per GPU).
    due = [9e9] * 90 + [10_000.0] * 10
    watch = EarlyStopWatch(long_and_short(below=10.0, deadlines=due))
    watch.on_tick(1000.0, done(arrived=100), 0)
    with pytest.raises(ReplayStopped) as stop:
        watch.on_tick(11_000.0, done(), 0)
    assert stop.value.stop["score_bound"] == pytest.approx(9.0)


def test_ticks_without_their_completions_tokens_fall_back_to_the_count_alone():
    # An older bridge's ticks carry no avg_osl: the tokens of what completed are unknown, so no tokens bound.
    watch = EarlyStopWatch(long_and_short(below=100.0))
    tick = {k: v for k, v in finished(5000.0, 20.0, 1000, arrived=100).items() if k not in ("avg_osl", "shape_count")}
    watch.on_tick(2000.0, tick, 0)  # the count alone: 1 miss of at least 10 tokens, 108.9 >= 100
    assert watch._goodput_tokens() == float("inf") and watch._sla_misses == 1


def test_what_completes_after_its_deadline_holds_no_goodput_even_where_its_window_names_only_one_miss():
    # The 10 long requests and 80 short ones are due by 50 s; 10 short ones never are. By 60 s two have completed,
    # one certainly late (their mean TTFT 2.5 s): up to 1,000 of their tokens may be goodput, plus the 100 tokens
    # still due (11 per GPU over the 100 s trace: not below 8). At 200 s two more complete, one named late again:
    # their window could hold a goodput request of 1,000 tokens, but a request completing after 60 s is goodput
    # only if it was due after 60 s, and those hold 100 tokens. So at most 1,100: 5.5 per GPU over 200 s. Without
    # that, the window's 1,000 would count (10.5); and the count of misses alone (89: 88 late, 1 named) leaves
    # every long request's tokens in.
    due = [50_000.0] * 80 + [9e9] * 10 + [50_000.0] * 10
    watch = EarlyStopWatch(long_and_short(below=8.0, deadlines=due))
    two = {"num_req": 0, "ttft_count": 2, "avg_ttft_ms": 2500.0, "itl_count": 2, "avg_itl_ms": 20.0,
           "shape_count": 2, "avg_osl": 505.0}  # fmt: skip
    watch.on_tick(40_000.0, {**two, "num_req": 100}, 0)
    watch.on_tick(60_000.0, done(), 0)
    with pytest.raises(ReplayStopped) as stop:
        watch.on_tick(200_000.0, two, 0)
    assert watch._completed_sla == 2 and watch._open_tokens + watch._due_after(200_000.0) == pytest.approx(2100.0)
    assert stop.value.stop["rule"] == "prune" and stop.value.stop["score_bound"] == pytest.approx(5.5)
