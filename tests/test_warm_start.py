"""The warm start: aiconfigurator's static estimate ranks a branch's pool, and round 0 replays a diverse top set.

The estimate and the pools are real (aiconfigurator's per-step model, the real pool enumeration);
the accuracy check replays with the real Dynamo replay. The pick logic is also tested on made-up
rankings (its own control flow).
"""

import pytest
from conftest import TRACE, build, config_data, rejected

from spica_lib.traces.scan import scan_trace
from spica_lib.facts.parallel import DisaggConfig, ParallelShape, ReplicaConfig
from spica_lib.pools.branches import enumerate_branches
from spica_lib.pools.estimate import LayoutEstimate, StepModel, Traffic, estimate_layout, traffic_of
from spica_lib.replay.request import run_replay
from spica_lib.search.rounds import SearchContext, suggest_round
from spica_lib.search.space import BranchSpace
from spica_lib.search.warm_start import Ranked, diverse_top, rank_pool, seed_parameters, warm_start
from spica_lib.trial.evaluate import prepare_trial

LIGHT = {"isl": 2048, "osl": 256, "request_rate": 2.0, "num_request_ratio": 30}
SLA = {"target": "goodput_per_gpu", "sla": {"ttft_ms": 2000, "itl_ms": 50}}


def light_config(**sweep):
    space = {"gpu_budget": 8, "deployment_mode": ["agg", "disagg"], "backend": ["vllm", "sglang"]}
    space |= {"router_mode": ["round_robin", "kv_router"], "agg_max_num_seqs": [512, 256]}
    return build(
        config_data(
            search_space=space,
            workload=LIGHT,
            goal=SLA,
            sweep={"candidates_per_round": 4, "max_rounds": 2, "algorithm": "nsga2", **sweep},
        )
    )


@pytest.fixture(scope="module")
def branches():
    return {b.spec.deployment_mode: b for b in enumerate_branches(light_config())}


def test_warm_start_is_on_by_default_and_refused_where_nothing_can_be_ranked():
    assert light_config().sweep.warm_start is True
    assert light_config(warm_start=False).sweep.warm_start is False
    kv_load = config_data(workload={"request_rate": None, "num_request_ratio": 4, "kv_load_ratio": 0.5})
    assert build(kv_load).sweep.warm_start is False  # the traffic is each candidate's own
    kv_load["sweep"] = {"warm_start": True}
    rejected(kv_load, "", "warm_start", "kv_load_ratio")


def test_a_trace_gives_its_mean_lengths_and_its_arrival_rate():
    data = config_data(
        workload={
            "trace_path": str(TRACE),
            "isl": None,
            "osl": None,
            "request_rate": None,
            "num_request_ratio": None,
            "arrival_speedup_ratio": 2.0,
        }
    )
    traffic = traffic_of(build(data).workload)
    scan = scan_trace(TRACE)
    assert traffic.isl == round(scan.input_tokens / scan.records) and traffic.osl == round(
        scan.output_tokens / scan.records
    )
    assert traffic.rate == pytest.approx(2.0 * scan.records / (scan.duration_ms / 1000.0))


def test_the_estimate_tracks_the_replay_on_the_layouts_that_meet_the_sla(branches):
    """Light load: the estimate's TTFT and ITL of an engine are within 30 % of the real replay's means."""
    config = light_config()
    agg = branches["agg"]
    model = StepModel(config.search_space.model_name, config.search_space.hardware_sku, agg.spec.backend_versions)
    traffic, space = traffic_of(config.workload), BranchSpace(agg.spec, agg.pool)
    for tp in (1, 2):
        layout = ReplicaConfig(shape=ParallelShape(tp=tp), replicas=1)
        estimate = estimate_layout(model, layout, "vllm", traffic)
        selection = space.decode(seed_parameters(space, layout, "vllm")).values
        trial = prepare_trial(config, selection, layout, backend_version=agg.spec.backend_versions["vllm"])
        metrics = run_replay(trial.replay).metrics
        assert estimate.ttft_ms == pytest.approx(metrics["mean_ttft_ms"], rel=0.3)
        assert estimate.itl_ms == pytest.approx(metrics["mean_itl_ms"], rel=0.3)


def test_an_overloaded_layout_is_estimated_as_serving_what_it_can():
    config = light_config()
    model = StepModel(config.search_space.model_name, "h200_sxm", {"vllm": "0.24.0"})
    heavy = Traffic(isl=8192, osl=256, rate=50.0)
    estimate = estimate_layout(model, ReplicaConfig(shape=ParallelShape(tp=1)), "vllm", heavy)
    assert estimate.served_rps < heavy.rate and estimate.ttft_ms == float("inf")
    more = estimate_layout(model, ReplicaConfig(shape=ParallelShape(tp=1), replicas=4), "vllm", heavy)
    assert more.served_rps == pytest.approx(4 * estimate.served_rps)
    # Overloaded, goodput is what stays within the SLA: less than what is served, and more with more engines.
    sla = config.goal.sla
    alone, four = (
        estimate_layout(model, ReplicaConfig(shape=ParallelShape(tp=1), replicas=n), "vllm", heavy, sla) for n in (1, 4)
    )
    assert 0 < alone.sla_rps < alone.served_rps and four.sla_rps == pytest.approx(4 * alone.sla_rps)
    # A decode batch that keeps growing has no steady state: the estimate says so instead of overflowing.
    one = ReplicaConfig(shape=ParallelShape(tp=1))
    flood = Traffic(isl=128, osl=4096, rate=200.0)
    split = estimate_layout(
        model, DisaggConfig(prefill=one.model_copy(update={"replicas": 4}), decode=one), "vllm", flood
    )
    assert split.served_rps < flood.rate and split.itl_ms == float("inf")


def test_light_load_ranks_the_fewest_gpus_that_meet_the_sla_first(branches):
    config = light_config()
    for mode, branch in branches.items():
        model = StepModel(config.search_space.model_name, "h200_sxm", branch.spec.backend_versions)
        ranked = rank_pool(config, branch.pool, model)
        assert len(ranked) == sum(len(r.backends) for r in branch.pool)
        best = max(ranked, key=lambda r: r.keys["goodput_per_gpu"])
        fewest = min(r.config.total_gpus for r in ranked)
        assert best.config.total_gpus == fewest, mode


def _ranked(gpus, backend, value):
    estimate = LayoutEstimate(
        layout=f"{gpus}", backend=backend, gpus=gpus, offered_rps=1, served_rps=1, sla_rps=1, ttft_ms=1, itl_ms=1, osl=1
    )
    layout = ReplicaConfig(shape=ParallelShape(tp=1), replicas=gpus)
    return Ranked(
        config=layout, backend=backend, estimate=estimate, keys={"a": (1.0, value, 0.0), "b": (1.0, -value, 0.0)}
    )


def test_picks_take_the_best_then_new_gpu_counts_and_backends_then_fill_by_rank():
    ranked = [
        _ranked(1, "vllm", 10),
        _ranked(1, "vllm", 9.5),
        _ranked(1, "sglang", 9),
        _ranked(2, "vllm", 5),
        _ranked(4, "vllm", 1),
    ]
    assert [i for i, _ in diverse_top(ranked, 4, ["a"])] == [0, 2, 3, 4]
    assert [i for i, _ in diverse_top(ranked, 5, ["a"])] == [0, 2, 3, 4, 1]
    assert [i for i, _ in diverse_top(ranked, 9, ["a"])] == [0, 2, 3, 4, 1]  # never more than the pool
    # A Pareto goal's objectives take turns.
    assert diverse_top(ranked, 2, ["a", "b"]) == [(0, "a"), (4, "b")]


def test_seeds_decode_to_their_layout_and_backend_with_knobs_at_the_first_choice(branches):
    for branch in branches.values():
        space = BranchSpace(branch.spec, branch.pool)
        for record in branch.pool[:: max(1, len(branch.pool) // 10)]:
            for backend in record.backends:
                selection = space.decode(seed_parameters(space, record.config, backend))
                assert selection.parallel_config == record.config and selection.values["backend"] == backend
                assert selection.values["router_mode"] == "round_robin"
                if branch.spec.deployment_mode == "agg":
                    assert selection.values["agg_max_num_seqs"] == 512  # the user's first, not the smallest


def test_round_zero_replays_the_seeds_the_same_for_any_seed_and_marks_them(branches):
    agg = branches["agg"]
    rounds = {}
    for seed in (0, 1):
        config = light_config(seed=seed)
        rounds[seed], specs = suggest_round(SearchContext(config=config), agg.spec, agg.pool, 0, None, {})
        assert len(specs) == 4 and all(item.warm_start for item in rounds[seed].suggested)
        record = rounds[seed].warm_start
        assert record.layouts_estimated == 30 and [p.estimate_rank for p in record.picks][0] == 1
        assert specs[0].used_gpus == 1  # light load: one GPU is enough
    assert rounds[0].new_keys == rounds[1].new_keys
    record, seeds = warm_start(light_config(), BranchSpace(agg.spec, agg.pool), 4)
    assert len({(p.gpus, p.backend) for p in record.picks}) == 4 and len(seeds) == 4
    off, _ = suggest_round(SearchContext(config=light_config(warm_start=False)), agg.spec, agg.pool, 0, None, {})
    assert off.warm_start is None and not any(item.warm_start for item in off.suggested)


def test_a_decode_whose_kv_cache_cannot_hold_its_batch_cannot_keep_up():
    # A conversation-like load (ISL 11.8k): one TP1 decode worker needs ~20 requests in flight, and its KV
    # cache holds ~20 of them; the replay drowned every such layout (under 1 % of the best score).
    model = StepModel("Qwen/Qwen3-32B", "h200_sxm", {"sglang": "0.5.14"})
    traffic = Traffic(isl=11780, osl=323, rate=3.34)
    split = DisaggConfig(prefill=ReplicaConfig(shape=ParallelShape(tp=2), replicas=3), decode=ReplicaConfig(shape=ParallelShape(tp=1)))
    unbounded = estimate_layout(model, split, "sglang", traffic)
    assert unbounded.keeps_up  # max_num_seqs alone never binds at this rate
    bounded = estimate_layout(model, split, "sglang", traffic, kv={"prefill": 244_386, "decode": 244_386})
    assert not bounded.keeps_up and bounded.served_rps < traffic.rate
    roomy = split.model_copy(update={"decode": ReplicaConfig(shape=ParallelShape(tp=2))})
    assert estimate_layout(model, roomy, "sglang", traffic, kv={"prefill": 244_386, "decode": 590_000}).keeps_up


def test_no_seed_goes_to_a_layout_expected_to_fall_behind_while_one_that_keeps_up_is_left():
    def ranked(gpus, backend, value, keeps_up=True):
        item = _ranked(gpus, backend, value)
        if keeps_up:
            return item
        estimate = item.estimate.model_copy(update={"ttft_ms": float("inf"), "itl_ms": float("inf")})
        return item._replace(estimate=estimate, keys={"a": (0.0, 0.0, value, -float("inf"))})

    items = [ranked(8, "vllm", 10), ranked(8, "sglang", 9), ranked(6, "vllm", 5), ranked(8, "vllm", 4),
             ranked(2, "vllm", 12, keeps_up=False), ranked(4, "sglang", 11, keeps_up=False)]  # fmt: skip
    for item in items[:4]:
        item.keys["a"] = (1.0, 1.0, *item.keys["a"][1:])
    # New kinds are taken among the layouts that keep up; the two that fall behind come last.
    assert [i for i, _ in diverse_top(items, 4, ["a"])] == [0, 1, 2, 3]
    assert [i for i, _ in diverse_top(items, 6, ["a"])] == [0, 1, 2, 3, 4, 5]
