"""A rehearsal's verdict: what a user feels, each metric against its tolerance, and a machine too loaded to judge.

Constructed summaries through the rehearsal's own judge (rehearsal/record.py); the rehearsals themselves, on this
machine and on the cluster, are in test_rehearsal.py.
"""

from spica_lib.rehearsal.record import (
    BUSY_LIMIT,
    TOLERANCES,
    LoadStats,
    MachineLoad,
    Rehearsal,
    RequestRow,
    differences,
    in_flight,
    judge,
)
from spica_lib.rehearsal.traffic import RehearsalTraffic, TrafficRequest, closed_loop


def stats(ttft=500.0, itl=25.0, tok_s=1600.0, sla=1.0) -> LoadStats:
    return LoadStats(requests=100, completed=100, ttft_mean_ms=ttft, ttft_p90_ms=2 * ttft, itl_mean_ms=itl,
                     itl_p90_ms=1.1 * itl, output_tok_s=tok_s, goodput_tok_s=tok_s, sla_share=sla)  # fmt: skip


def rehearsal(live: LoadStats, busy: float = 0.2, closed_live: float = 1400.0) -> Rehearsal:
    found = Rehearsal(rank=1, key="k", deployment="d", where="local", speedup=1.0, traffic="t", live=live,
                      replay=stats(), closed_live=stats(tok_s=closed_live), closed_replay=stats(tok_s=1400.0),
                      machine=[MachineLoad(cores=2, busy_share=busy, loop_lag_p90_ms=2.0, loop_lag_max_ms=9.0)] * 2)  # fmt: skip
    found.differences = differences(found.live, found.replay)
    return found


def test_a_deployment_within_every_tolerance_agrees():
    assert judge(rehearsal(stats(ttft=620.0, itl=28.0, tok_s=1580.0))) == ("agrees", [])


def test_each_metric_outside_its_tolerance_is_named_and_the_closed_loop_counts():
    verdict, reasons = judge(rehearsal(stats(ttft=700.0, sla=0.9), closed_live=1000.0))
    assert verdict == "differs"
    assert any(r.startswith("ttft_mean_ms +40.0 % (tolerance 25 %)") for r in reasons)
    assert any(r.startswith("sla_share -10.0 points (tolerance 5 points)") for r in reasons)
    assert any(r.startswith("closed_output_tok_s -28.6 %") for r in reasons)
    assert TOLERANCES["output_tok_s"] == TOLERANCES["closed_output_tok_s"] == 0.10


def test_a_loaded_machine_is_said_to_be_too_loaded_instead_of_blaming_the_deployment():
    verdict, reasons = judge(rehearsal(stats(ttft=900.0, itl=40.0), busy=BUSY_LIMIT + 0.1))
    assert verdict == "too loaded to judge latency" and "ttft" not in " ".join(reasons)
    assert reasons[0].startswith("the machine during the open loop: 95 % of 2 CPUs busy")
    # Throughput is still the replay's own claim: a loaded machine does not excuse it.
    verdict, reasons = judge(rehearsal(stats(tok_s=1200.0), busy=0.99))
    assert verdict == "differs" and reasons[0].startswith("output_tok_s -25.0 %")


def test_the_closed_loop_runs_the_concurrency_the_replay_carried_on_prompts_of_its_own():
    rows = [RequestRow(start_ms=100.0 * i, end_ms=100.0 * i + 400.0, output_tokens=10) for i in range(100)]
    assert in_flight(rows) == 4  # 100 requests of 400 ms over 10.3 s: 3.9 in flight on average
    traffic = RehearsalTraffic(requests=[TrafficRequest(arrival_ms=10.0 * i, input_tokens=64, output_tokens=8,
                                                        hash_ids=(i % 3, 100 + i)) for i in range(8)],
                               source="s")  # fmt: skip
    closed = closed_loop(traffic, 4)
    assert closed.in_flight_cap == 4 and {r.arrival_ms for r in closed.requests} == {0.0}
    opened = {h for r in traffic.requests for h in r.hash_ids}
    assert not opened & {h for r in closed.requests for h in r.hash_ids}  # nothing the open loop cached
    assert closed.requests[0].hash_ids[0] == closed.requests[3].hash_ids[0]  # the same sharing within the sample
