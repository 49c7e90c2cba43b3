"""The round logic (suggest -> trials -> tell) with the real Vizier and a fake replay.

`FakeReplay` stands in for the Dynamo replay so these tests exercise our own control flow:
dedup and caching, replacements, unsupported pairs, the budget gate, stalls, ranking, fronts.
"""

import pytest
from conftest import build, config_data

from spica_lib.facts.kv_capacity import KvSettings
from spica_lib.facts.parallel import ParallelShape, ReplicaConfig
from spica_lib.pools.branches import BranchSpec, PoolRecord
from spica_lib.results.merge import collect_candidates, ordered
from spica_lib.results.summary import summarise
from spica_lib.search.in_process import run_round, run_search
from spica_lib.search.rounds import REPLACEMENT_FACTOR, SearchContext, suggest_round
from spica_lib.search.space import BranchSpace
from spica_lib.trial.spec import TrialResult

pytestmark = pytest.mark.slow  # imports Vizier (JAX)


def layout(tp, replicas=1):
    return ReplicaConfig(shape=ParallelShape(tp=tp), replicas=replicas)


def branch(pool, knobs, gpu_budget=8, mode="agg"):
    spec = BranchSpec(
        deployment_mode=mode,
        status="ready",
        backends=sorted({b for r in pool for b in r.backends}),
        backend_versions={"vllm": "0.24.0", "sglang": "0.5.14"},
        skipped_backends=[],
        knob_choices=knobs,
        float_ranges={},
        gpu_budget=gpu_budget,
        min_gpu_budget=None,
        max_seq_len=40960,
        kv_settings={"agg": KvSettings()},
        pinned=False,
        pool_size=len(pool),
        pool_size_by_backend={},
        dropped_shapes=[],
        hardware=None,
    )
    return spec


def record(config, backends=("vllm",)):
    return PoolRecord(config=config, backends=list(backends), kv_tokens={b: {"agg": 100_000} for b in backends})


class FakeReplay:
    """Fake replay (control flow only): throughput grows with max_num_seqs and GPUs; counts calls."""

    def __init__(self):
        self.calls = 0

    def __call__(self, spec):
        self.calls += 1
        seqs = spec.sample["agg_max_num_seqs"]
        gpus = spec.used_gpus
        metrics = {"output_throughput_tok_s": seqs * gpus * 1.0, "mean_output_token_throughput_per_user": 1000.0 / gpus}
        objectives = None
        score = metrics["output_throughput_tok_s"]
        if spec.goal.is_pareto:
            objectives = {
                "throughput_per_gpu": seqs * 1.0,
                "throughput_per_user": metrics["mean_output_token_throughput_per_user"],
            }
            score = objectives["throughput_per_gpu"]
        return TrialResult(
            status="feasible",
            metrics=metrics,
            objectives=objectives,
            score=score,
            used_gpus=gpus,
            average_gpus=float(gpus),
        )


def knobs(**extra):
    base = {
        "agg_max_num_batched_tokens": [8192],
        "agg_max_num_seqs": [256, 512, 1024],
        "router_mode": ["round_robin"],
        "planner_scaling_policy": ["disabled"],
        "backend": ["vllm"],
    }
    return {**base, **extra}


def sweep(config, spec, pool, rounds, replay):
    """Drive the rounds the way the workflow does (refill passes included), with trial files kept in a dict."""
    context = SearchContext(config=config)
    history, store, files = None, {}, []
    for k in range(rounds):
        history, passes = run_round(context, spec, pool, k, history, store, replay)
        files.append(passes[0])
    return history, files, store


def cfg(algorithm="random", per_round=2, rounds=3, goal=None, warm_start=False):
    # The designer's own rounds; the warm start's round 0 is tests/test_warm_start.py's.
    sweep = {"algorithm": algorithm, "candidates_per_round": per_round, "max_rounds": rounds, "seed": 3}
    data = config_data(sweep={**sweep, "warm_start": warm_start})
    if goal:
        data["goal"] = goal
    return build(data)


def test_rounds_suggest_new_trials_and_rank_best_first():
    pool = [record(layout(1, r)) for r in (1, 2, 4)]
    config, replay = cfg(), FakeReplay()
    history, files, store = sweep(config, branch(pool, knobs()), pool, 2, replay)
    assert [len(f.new_keys) for f in files] == [2, 2] and replay.calls == 4
    assert all(o.status == "feasible" for o in history.observations) and not history.stalled
    best = ordered(config, collect_candidates([history], store))
    scores = [row.candidate.score for row in best]
    assert len(best) == 4 and scores == sorted(scores, reverse=True)
    assert best[0].candidate.config["used_gpus"] * best[0].candidate.config["agg_max_num_seqs"] == scores[0]
    # Each round's tally carries the branch's best so far, for the progress line and `spica status`.
    first_round = max(store[k].result.score for k in files[0].new_keys)
    assert [t.best_score for t in history.tallies] == [first_round, scores[0]]


def test_same_files_and_seed_give_the_same_suggestions():
    pool = [record(layout(1, r)) for r in (1, 2, 4, 8)]
    config = cfg(algorithm="eagle", per_round=3)
    spec = branch(pool, knobs())
    first, _ = suggest_round(SearchContext(config=config), spec, pool, 0, None, {})
    again, _ = suggest_round(SearchContext(config=config), spec, pool, 0, None, {})
    assert first.new_keys == again.new_keys and [s.params for s in first.suggested] == [
        s.params for s in again.suggested
    ]


def test_repeats_are_told_from_cache_and_a_spent_space_stalls():
    pool = [record(layout(2, 1))]  # one layout, one searched knob with 3 values: 3 distinct trials in all
    config, replay = cfg(per_round=2, rounds=4), FakeReplay()
    history, files, store = sweep(config, branch(pool, knobs()), pool, 4, replay)
    assert replay.calls == 3 and len(store) == 3  # never replays a trial twice
    assert [len(f.new_keys) for f in files] == [2, 1, 0, 0]
    assert files[1].attempts == REPLACEMENT_FACTOR * 2  # asked for replacements up to the cap
    assert history.stalled and "round 1" in history.stall_reason
    assert files[2].skipped and files[3].skipped  # later rounds are no-ops, not errors
    cached = [o for o in history.observations if o.status == "cache_hit"]
    assert cached and all(o.metrics for o in cached)


def test_a_backend_that_cannot_run_the_layout_is_told_unsupported_without_replay():
    pool = [record(layout(2, 2), backends=("vllm",))]
    config, replay = cfg(per_round=2, rounds=1), FakeReplay()
    spec = branch(pool, knobs(backend=["vllm", "sglang"], agg_max_num_seqs=[256, 512, 1024]))
    history, files, _ = sweep(config, spec, pool, 1, replay)
    unsupported = [s for s in files[0].suggested if s.outcome == "unsupported"]
    assert all(s.selection["backend"] == "sglang" for s in unsupported)
    assert all("does not support" in s.reason for s in unsupported)
    assert replay.calls == len(files[0].new_keys) and all(
        s.selection["backend"] == "vllm" for s in files[0].suggested if s.outcome == "new"
    )


def test_over_budget_layouts_are_gated_before_any_replay():
    pool = [record(layout(4, 4))]  # 16 GPUs in a branch whose budget is 8
    config, replay = cfg(per_round=1, rounds=1), FakeReplay()
    history, files, _ = sweep(config, branch(pool, knobs(), gpu_budget=8), pool, 1, replay)
    assert replay.calls == 0 and files[0].attempts == REPLACEMENT_FACTOR
    assert {o.status for o in history.observations} == {"infeasible"}
    assert all(o.reason == "over gpu_budget: used_gpus=16 > gpu_budget=8" for o in history.observations)
    assert history.stalled


def test_a_stall_stops_only_its_own_branch():
    small = [record(layout(2, 1))]
    wide = [record(layout(1, r)) for r in range(1, 9)]
    config = cfg(per_round=2, rounds=3)
    small_history, _, _ = sweep(config, branch(small, knobs(agg_max_num_seqs=[256, 512])), small, 3, FakeReplay())
    wide_history, wide_files, _ = sweep(config, branch(wide, knobs()), wide, 3, FakeReplay())
    assert small_history.stalled and not wide_history.stalled
    assert [len(f.new_keys) for f in wide_files] == [2, 2, 2]


def test_pareto_sweep_keeps_the_non_dominated_points():
    pool = [record(layout(1, r)) for r in (1, 2, 4, 8)]
    goal = {"target": "pareto", "pareto_objectives": ["throughput_per_gpu", "throughput_per_user"]}
    config, replay = cfg(algorithm="nsga2", per_round=4, rounds=2, goal=goal), FakeReplay()
    history, _, store = sweep(config, branch(pool, knobs()), pool, 2, replay)
    rows = collect_candidates([history], store)
    front = ordered(config, rows)
    per_user = [r.candidate.objectives["throughput_per_user"] for r in front]
    assert per_user == sorted(per_user) and front
    for row in rows:  # everything off the front is dominated by something on it
        if row not in front:
            o = row.candidate.objectives
            assert any(
                f.candidate.objectives["throughput_per_gpu"] >= o["throughput_per_gpu"]
                and f.candidate.objectives["throughput_per_user"] >= o["throughput_per_user"]
                for f in front
            )
    assert all(
        set(o.metrics) == {"throughput_per_gpu", "throughput_per_user"}
        for o in history.observations
        if o.status == "feasible"
    )
    summary = summarise(config, [history], store, front)
    assert summary.front_size == len(front) and "pareto front" in summary.line


def test_summary_counts_outcomes_and_failure_reasons():
    pool = [record(layout(4, 4))]
    config = cfg(per_round=1, rounds=1)
    history, _, store = sweep(config, branch(pool, knobs(), gpu_budget=8), pool, 1, FakeReplay())
    summary = summarise(config, [history], store, [])
    assert summary.tallies["infeasible"] == REPLACEMENT_FACTOR and summary.best_score is None
    assert "NO feasible candidate" in summary.line


def test_branch_space_decodes_composites_and_pins():
    pool = [record(layout(2, 1))]
    policy = {
        "enable_throughput_scaling": False,
        "enable_load_scaling": True,
        "throughput_adjustment_interval_seconds": None,
        "load_adjustment_interval_seconds": 7,
    }
    spec = branch(pool, knobs(planner_scaling_policy=["disabled", policy], agg_max_num_seqs=[512]))
    space = BranchSpace(spec, pool)
    assert space.constants["agg_max_num_seqs"] == 512 and "used_gpu_ratio" not in space.parameter_names
    assert space.decode({"planner_scaling_policy": "1"}).values["planner_scaling_policy"] == policy
    pinned = BranchSpace(branch(pool, knobs(agg_max_num_seqs=[512], planner_scaling_policy=["disabled"])), pool)
    assert pinned.parameter_names == ["_spica_constant"]
    decoded = BranchSpace(branch(pool, knobs()), pool).decode({"agg_max_num_seqs": 512.0})
    assert decoded.values["agg_max_num_seqs"] == 512 and isinstance(decoded.values["agg_max_num_seqs"], int)


def test_goodput_misses_are_told_how_far_they_missed():
    from spica_lib.search.metrics import designer_metrics

    goal = build(config_data(goal={"target": "goodput_per_gpu", "sla": {"ttft_ms": 1000, "itl_ms": 50}})).goal
    met = TrialResult(status="feasible", score=12.0, used_gpus=1, metrics={})
    near = TrialResult(status="feasible", score=0.0, used_gpus=1, metrics={"mean_ttft_ms": 1500, "mean_itl_ms": 40})
    far = TrialResult(status="feasible", score=0.0, used_gpus=1, metrics={"mean_ttft_ms": 9000, "mean_itl_ms": 40})
    assert designer_metrics(met, goal) == {"objective": 12.0}
    assert designer_metrics(far, goal)["objective"] < designer_metrics(near, goal)["objective"] < 0
    throughput = build(config_data()).goal
    assert designer_metrics(TrialResult(status="feasible", score=0.0, used_gpus=1), throughput) == {"objective": 0.0}


class FailingReplay(FakeReplay):
    """Fake replay (control flow only) whose simulator always crashes."""

    def __call__(self, spec):
        self.calls += 1
        return TrialResult(
            status="failed", reason="replay failed: Exception: replay invariant violated", used_gpus=spec.used_gpus
        )


def test_a_branch_whose_replays_all_fail_is_reported_not_raised():
    pool = [record(layout(1, r)) for r in (1, 2, 4, 8)]
    config, replay = cfg(per_round=2, rounds=2), FailingReplay()
    history, files, store = sweep(config, branch(pool, knobs()), pool, 2, replay)
    # Failures are replaced within the round until its 11x cap (as the reference does), then the branch stops.
    cap = REPLACEMENT_FACTOR * 2
    # A proposal of a trial that already failed is told that failure, and moved to a trial not tried yet.
    moved = history.tallies[0].moved
    told = cap + moved
    assert len(history.observations) == told and history.tallies[0].attempts == cap and history.tallies[0].refills > 0
    assert history.stalled and "0/2 new configuration(s) that replayed" in history.stall_reason
    assert {o.status for o in history.observations} == {"failed"} and replay.calls == len(store) <= 12
    assert all(o.metrics == {} and "invariant" in o.reason for o in history.observations)
    summary = summarise(config, [history], store, ordered(config, collect_candidates([history], store)))
    assert summary.tallies["failed"] == told and summary.failure_reasons == {
        "replay failed: Exception: replay invariant violated": told
    }
    assert f"(x{told})" in summary.line and "NO feasible candidate" in summary.line


class FailsFirst(FakeReplay):
    """Fake replay (control flow only): the first replay times out, every later one replays."""

    def __call__(self, spec):
        if self.calls == 0:
            self.calls += 1
            return TrialResult(status="timed_out", reason="exceed runtime: replay > 1s", used_gpus=spec.used_gpus)
        return super().__call__(spec)


def test_a_failed_replay_gets_a_replacement_within_its_round():
    pool = [record(layout(1, r)) for r in (1, 2, 4)]
    config, replay = cfg(per_round=3, rounds=1), FailsFirst()
    context = SearchContext(config=config)
    store = {}
    history, passes = run_round(context, branch(pool, knobs()), pool, 0, None, store, replay)
    failed = [k for k in passes[0].new_keys if store[k].result.status == "timed_out"]
    assert len(failed) == 1 and replay.calls == 4
    refill = passes[1]
    assert refill.refill == 1 and refill.replaces == failed and refill.target == len(failed)
    assert refill.first_batch == len(passes[0].batches()) and refill.new_keys
    assert all(i.trial_batch in refill.batch_numbers() for i in refill.suggested if i.outcome == "new")
    replayed = [k for p in passes for k in p.new_keys if store[k].result.status != "timed_out"]
    assert len(replayed) == 3 and not history.stalled and history.tallies[0].refills == len(passes) - 1
    # The refill's designer was told the failure: its observation is in the history with its reason.
    told = {o.key: o for o in history.observations}
    assert all(told[k].status == "timed_out" and "exceed runtime" in told[k].reason for k in failed)


def test_a_user_list_of_engine_values_is_searched_exactly_in_numeric_order():
    values = [16384, 2048, 6144, 4096, 8192]  # not the reference's set, and not sorted
    pool = [record(layout(1, r)) for r in (1, 2)]
    data = config_data(
        search_space={"agg_max_num_batched_tokens": values},
        sweep={"algorithm": "random", "candidates_per_round": 3, "max_rounds": 4, "seed": 5},
    )
    config = build(data)
    spec = branch(pool, knobs(agg_max_num_batched_tokens=config.search_space.agg_max_num_batched_tokens))
    parameter = next(k for k in BranchSpace(spec, pool).knobs if k.name == "agg_max_num_batched_tokens")
    assert parameter.kind == "discrete" and parameter.values == tuple(float(v) for v in sorted(values))
    _, _, store = sweep(config, spec, pool, 4, FakeReplay())
    seen = {record.spec.sample["agg_max_num_batched_tokens"] for record in store.values()}
    assert seen <= set(values) and len(seen) > 1
    assert all(record.spec.replay.plan.agg_engine_args["max_num_batched_tokens"] in values for record in store.values())


def test_a_percentile_sla_miss_is_observed_infeasible_but_still_tells_the_distance():
    from spica_lib.search.history import Suggested, observe

    sla = {"ttft_ms": 1000, "percentile": 99}
    goal = build(config_data(goal={"target": "throughput", "sla": sla})).goal
    item = Suggested(vizier_id=1, params={}, key="k", outcome="new", trial_round=0, trial_batch=0)
    near = TrialResult(status="infeasible", reason="misses", score=50.0, used_gpus=1, sla_miss=1.5)
    far = TrialResult(status="infeasible", reason="misses", score=90.0, used_gpus=1, sla_miss=9.0)
    told = [observe(item, 0, goal, result) for result in (near, far)]
    assert all(o.status == "infeasible" for o in told)
    assert told[1].metrics["objective"] < told[0].metrics["objective"] < 0  # a bigger miss is worse, whatever the score
    broken = TrialResult(status="failed", reason="crash", used_gpus=1)
    assert observe(item, 0, goal, broken).metrics == {}


def test_a_suggestion_that_names_only_some_parameters_takes_the_defaults_for_the_rest():
    # GP-UCB-PE (google-vizier 0.1.24) was seen suggesting {"backend": "sglang"} alone in a later round.
    pool = [record(layout(1, r), ("vllm", "sglang")) for r in (1, 2, 4)]
    space = BranchSpace(branch(pool, knobs(backend=["vllm", "sglang"])), pool)
    completed = space.complete({"backend": "sglang"})
    assert set(completed) == set(space.parameter_names) and completed["backend"] == "sglang"
    selection = space.decode(completed)
    assert selection.values["backend"] == "sglang" and selection.values["agg_max_num_seqs"] == 256


class RefusingReplay(FakeReplay):
    """Fake replay (control flow only): refuses every 4-GPU layout the way the pinned replay refuses a layout."""

    REFUSAL = "offline disaggregated replay does not support attention DP; prefill/decode dp_size must both be 1"

    def __init__(self):
        super().__init__()
        self.refused = []

    def __call__(self, spec):
        if spec.used_gpus == 4:
            self.calls += 1
            self.refused.append(spec.sample["agg_max_num_seqs"])
            return TrialResult(status="failed", reason=self.REFUSAL, used_gpus=4)
        return super().__call__(spec)


def test_a_layout_the_replay_refused_is_not_replayed_again_under_other_knobs():
    pool = [record(layout(1, r)) for r in (1, 2, 4)]
    # One candidate per pass: a refusal is known before the next pass is asked for.
    config, replay = cfg(per_round=1, rounds=6), RefusingReplay()
    history, files, _ = sweep(config, branch(pool, knobs()), pool, 6, replay)
    # 3 values of max_num_seqs could each have replayed the refused layout; it is replayed once.
    assert len(replay.refused) == 1
    later = [s for f in files for s in f.suggested if s.reason and "refused this layout earlier" in s.reason]
    assert later and {(s.outcome, s.layout) for s in later} == {("unsupported", layout(1, 4).label())}
    refusals = [o for o in history.observations if o.status == "failed"]
    assert [(o.layout, o.backend) for o in refusals] == [(layout(1, 4).label(), "vllm")]


def windowed_sweep(config, spec, pool, replay):
    """Rounds in flight driven the way the workflow orders them (search/in_process.py: run_search)."""
    store = {}
    history, passes = run_search(SearchContext(config=config), spec, pool, store, replay)
    return history, [p[0] for p in passes], store


def test_rounds_in_flight_never_suggest_a_trial_another_round_still_replays():
    pool = [record(layout(2, 1))]  # 3 distinct trials in all
    proposed_again = 0
    for seed in range(5):
        data = config_data(sweep={"algorithm": "random", "candidates_per_round": 1, "max_rounds": 3, "seed": seed,
                                  "warm_start": False, "rounds_in_flight": 3})  # fmt: skip
        config, replay = build(data), FakeReplay()
        history, passes, store = windowed_sweep(config, branch(pool, knobs()), pool, replay)
        # All three rounds were asked for before any was told, and still chose three different trials.
        assert [p.in_flight for p in passes] == [[], [0], [0, 1]]
        assert replay.calls == 3 and len({k for p in passes for k in p.new_keys}) == 3
        # A proposal of an in-flight trial is a duplicate of the round that replays it, told (as a
        # cache hit) once tell reaches its own round.
        again = [(s, p.round) for p in passes for s in p.suggested if s.outcome == "duplicate"]
        assert all(s.trial_round < round_ and s.key in passes[s.trial_round].new_keys for s, round_ in again)
        hits = [o for o in history.observations if o.status == "cache_hit"]
        assert len(hits) == len(again) and all(o.metrics for o in hits)
        proposed_again += len(again)
    assert proposed_again  # the designer did propose trials still in flight (random, 3 points)


def test_rounds_in_flight_split_the_warm_start_between_the_rounds_that_start_together():
    pool = [record(layout(1, r)) for r in (1, 2, 4, 8)]
    sweep_ = {"algorithm": "random", "candidates_per_round": 1, "max_rounds": 4, "seed": 3, "rounds_in_flight": 2}
    config = build(config_data(sweep={**sweep_, "warm_start": True}))
    spec = branch(pool, knobs())
    context = SearchContext(config=config)
    first, _ = suggest_round(context, spec, pool, 0, None, {})
    second, _ = suggest_round(context, spec, pool, 1, None, {}, in_flight=[first])
    assert all(s.warm_start for s in first.suggested + second.suggested)
    assert first.warm_start.picks[0].layout != second.warm_start.picks[0].layout  # the estimate's 1st, then 2nd
    assert first.new_keys != second.new_keys


def test_rounds_in_flight_cannot_exceed_the_rounds():
    with pytest.raises(Exception, match="rounds_in_flight: 4 rounds at once is more than max_rounds"):
        build(config_data(sweep={"max_rounds": 3, "rounds_in_flight": 4}))


def test_a_refill_beside_rounds_in_flight_needs_no_result_of_their_trials():
    from spica_lib.search.rounds import refill_round

    pool = [record(layout(2, 1))]  # 3 distinct trials in all
    spec, checked = branch(pool, knobs()), 0
    for seed in range(10):
        data = config_data(sweep={"algorithm": "random", "candidates_per_round": 1, "max_rounds": 2, "seed": seed,
                                  "warm_start": False, "rounds_in_flight": 2})  # fmt: skip
        context = SearchContext(config=build(data))
        first, _ = suggest_round(context, spec, pool, 0, None, {})
        second, _ = suggest_round(context, spec, pool, 1, None, {}, in_flight=[first])
        if not any(s.outcome == "duplicate" for s in second.suggested):
            continue
        # Round 1's own trial failed while round 0's is still replaying: its result is nowhere yet.
        failed = TrialResult(status="failed", reason="replay error", used_gpus=2)
        refill, specs = refill_round(context, spec, pool, None, [second], {second.new_keys[0]: failed}, in_flight=[first])
        assert refill.in_flight == [0] and refill.replaces == second.new_keys
        assert len(specs) == 1 and specs[0].key() not in (first.new_keys + second.new_keys)
        checked += 1
    assert checked  # some seed proposed round 0's trial again in round 1


def test_each_round_from_round_one_carries_a_prefix_budget_from_the_prefixes_told_before_it():
    from spica_lib.replay.request import PaceCheckpoint
    from spica_lib.replay.stall import PREFIX_FACTOR

    class PacedReplay(FakeReplay):
        """The fake replay with a pace checkpoint (control flow only): a prefix of 0.5 CPU s per GPU."""

        def __call__(self, spec):
            result = super().__call__(spec)
            cpu = 0.5 * spec.used_gpus
            checkpoint = PaceCheckpoint(prefix="p", completed=1, at_sim_ms=1.0, replay_seconds=cpu, cpu_seconds=cpu)
            return result.model_copy(update={"checkpoint": checkpoint})

    pool = [record(layout(1, r)) for r in (1, 2, 4)]
    history, files, store = sweep(cfg(), branch(pool, knobs()), pool, 3, PacedReplay())
    assert files[0].prefix_seconds is None  # nothing told before round 0
    for k in (1, 2):
        told = [o.key for o in history.observations if o.round < k and o.key]
        slowest = max(store[key].result.checkpoint.cpu_seconds for key in told)
        assert files[k].prefix_seconds == pytest.approx(PREFIX_FACTOR * slowest)
