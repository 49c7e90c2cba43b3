"""The in-replay screen's rules on hand-made ticks (the real replay is in test_trial_replay.py)."""

import pytest

from spica_lib.replay.sla_watch import ReplayScreened, SlaWatch

SYNTHETIC = {"args": [1024, 128, 20], "bounds": [["mean_ttft_ms", 1000.0], ["mean_itl_ms", 50.0]], "margin": 2.0,
             "fraction": 0.2, "prefix": "first 20 of 100 requests"}  # fmt: skip


def traffic(completed=0, ttft=0.0, itl=0.0):
    return {"ttft_count": completed, "avg_ttft_ms": ttft, "itl_count": completed, "avg_itl_ms": itl}


SCREEN_TTFT = {**SYNTHETIC, "bounds": [["mean_ttft_ms", 1000.0], ["mean_itl_ms", 50.0]]}


def test_time_queued_for_prefill_rules_a_candidate_out_once_it_alone_passes_the_margin():
    told = []
    watch = SlaWatch(SYNTHETIC, requests=100, on_screen=told.append)
    watch.on_tick(0.0, traffic(), queued=0, finished=0)
    watch.on_tick(1000.0, traffic(), queued=50, finished=0)  # min(0, 50) x 1 s: nothing counted yet
    watch.on_tick(2000.0, traffic(), queued=100, finished=0)  # 50 requests x 1 s = 50 s queued: 500 ms each
    watch.on_tick(3000.0, traffic(), queued=100, finished=0)  # + 100 x 1 s: 150 s, 1500 ms each
    with pytest.raises(ReplayScreened) as stop:
        watch.on_tick(4000.0, traffic(), queued=100, finished=0)  # 250 s: 2500 ms each, past 2 x 1000 ms
    verdict = stop.value.verdict
    assert verdict["screened"] and verdict["metric"] == "mean_ttft_ms" and verdict["value"] == pytest.approx(2500.0)
    assert verdict["ratio"] == pytest.approx(2.5) and "100 requests were waiting for prefill at 4 s" in verdict["why"]
    assert told == []  # stopped before its screen's point


def test_the_completed_requests_ttfts_alone_can_rule_out_a_mean_bound_whatever_the_rest_does():
    watch = SlaWatch(SYNTHETIC, requests=100, on_screen=None)  # margin 2: 2 x 100 x 1 s may be spent
    watch.on_tick(0.0, traffic(completed=10, ttft=15000.0), queued=0, finished=10)  # 150 s
    with pytest.raises(ReplayScreened) as stop:
        watch.on_tick(1000.0, traffic(completed=10, ttft=6000.0), queued=0, finished=20)  # 210 s > 200 s
    assert stop.value.verdict["value"] == pytest.approx(2100.0) and "whatever the rest does" in stop.value.verdict["why"]
    assert stop.value.metrics["completed_requests"] == 20 and stop.value.metrics["mean_ttft_ms"] == 10500.0


def test_at_its_screen_point_a_candidate_within_the_margin_is_told_and_goes_on_and_one_past_it_stops():
    told = []
    watch = SlaWatch(SCREEN_TTFT, requests=100, on_screen=told.append)
    watch.on_tick(0.0, traffic(completed=19, ttft=1500.0, itl=900.0), queued=0, finished=19)  # 19 < 20: not yet
    assert told == []
    watch.on_tick(1000.0, traffic(completed=1, ttft=1500.0, itl=900.0), queued=0, finished=20)
    (verdict,) = told
    # The ticks' ITL is not the SLA's statistic: only the TTFT bound is judged (1.5x, within the margin).
    assert not verdict["screened"] and verdict["metric"] == "mean_ttft_ms" and verdict["ratio"] == pytest.approx(1.5)
    assert watch.final_verdict({}) == verdict  # a replay that runs to its end keeps the verdict told
    over = SlaWatch(SCREEN_TTFT, requests=100, on_screen=told.append)
    with pytest.raises(ReplayScreened) as stop:
        over.on_tick(0.0, traffic(completed=20, ttft=2500.0, itl=10.0), queued=0, finished=20)
    assert "mean_ttft_ms 2500 on the first 20 of 100 requests (its first 20 completed" in stop.value.verdict["why"]


def test_a_replay_too_short_to_tick_at_its_screen_point_is_judged_on_its_own_statistics_every_bound_included():
    watch = SlaWatch(SCREEN_TTFT, requests=100, on_screen=None)
    verdict = watch.final_verdict({"completed_requests": 100, "mean_ttft_ms": 500.0, "mean_itl_ms": 75.0})
    assert not verdict["screened"] and verdict["metric"] == "mean_itl_ms" and verdict["ratio"] == pytest.approx(1.5)


def test_a_trace_is_judged_at_its_prefix_s_simulated_time_and_nothing_done_by_then_is_hopeless():
    screen = {"kwargs": {"max_sim_time_ms": 10_000.0}, "bounds": [["p99_ttft_ms", 3000.0]], "margin": 2.0,
              "fraction": 0.2, "prefix": "first 10 s of 50 s simulated"}  # fmt: skip
    watch = SlaWatch(screen, requests=500, on_screen=None)
    watch.on_tick(5000.0, traffic(), queued=0, finished=0)
    with pytest.raises(ReplayScreened) as stop:
        watch.on_tick(10_000.0, traffic(), queued=0, finished=0)
    assert stop.value.verdict["ratio"] >= 1e6 and "no request finished" in stop.value.verdict["why"]


def test_an_end_to_end_bound_is_left_to_the_finished_replay():
    screen = {**SYNTHETIC, "bounds": [["mean_e2e_latency_ms", 10.0]]}
    watch = SlaWatch(screen, requests=100, on_screen=None)
    watch.on_tick(0.0, traffic(completed=50, ttft=9e9, itl=9e9), queued=0, finished=50)
    watch.on_tick(9e9, traffic(completed=50, ttft=9e9, itl=9e9), queued=10**6, finished=100)  # no rule applies
