"""The sequential finish's control flow: samples only where they can still change the recommendation.

The replayer here is a fake (`fake_replayer`): these tests check our own loop (which deployments get
which samples, when it stops), with scores drawn from known true means. The real replays of a finish
are in test_finish.py.
"""

import zlib

import numpy as np
import pytest
from conftest import build, config_data

from spica_lib.facts.parallel import ParallelShape, ReplicaConfig
from spica_lib.results.finish import SAMPLE_SEPARATOR
from spica_lib.results.sequential import looks, run_finish
from spica_lib.trial.evaluate import prepare_trial
from spica_lib.trial.spec import TrialResult


def top_of(config, gpus_by_key):
    """Real trial specs (their keys do not matter here) with a search result each."""
    out = {}
    for key, gpus in gpus_by_key.items():
        selection = {"deployment_mode": "agg", "backend": "vllm", "router_mode": "round_robin",
                     "planner_scaling_policy": "disabled", "agg_max_num_batched_tokens": 8192, "agg_max_num_seqs": 256}  # fmt: skip
        layout = ReplicaConfig(shape=ParallelShape(tp=1), replicas=gpus)
        spec = prepare_trial(config, selection, layout, backend_version="0.24.0")
        out[key] = (spec, TrialResult(status="feasible", score=100.0, used_gpus=gpus))
    return out


def fake_replayer(means, sd, asked):
    """Scores around each deployment's true mean, with a day effect shared by all on the same sample index."""
    day = np.random.default_rng(5).normal(0, 20.0, size=64)

    def replay(specs):
        asked.append(sorted(specs))
        out = {}
        for name in specs:
            key, _, index = name.partition(SAMPLE_SEPARATOR)
            noise = np.random.default_rng([zlib.crc32(key.encode()), int(index)]).normal(0, sd)
            out[name] = TrialResult(status="feasible", score=float(means[key] + day[int(index)] + noise), used_gpus=4)
        return out

    return replay


def config(**sweep):
    return build(config_data(goal={"target": "throughput"}, sweep={"finish_top": 3, **sweep}))


def test_the_looks_double_up_to_the_cap():
    assert looks(4, 16) == [4, 8, 16] and looks(3, 10) == [3, 6, 10] and looks(1, 1) == [1]


def test_clear_gaps_are_decided_at_the_first_look():
    cfg = config(finish_samples=4, finish_max_samples=16)
    asked = []
    top = top_of(cfg, {"best": 4, "mid": 4, "low": 4})
    result = run_finish(cfg, top, fake_replayer({"best": 500.0, "mid": 300.0, "low": 100.0}, 2.0, asked))
    assert len(asked) == 1 and all(len(d.samples) == 4 for d in result.deployments)
    assert result.stopped.startswith("decided after 4")


def test_samples_go_only_to_deployments_still_in_contention_and_stop_when_decided():
    cfg = config(finish_samples=4, finish_max_samples=16)
    asked = []
    # "cheap" is truly 1 % behind "best" on fewer GPUs (it should end up recommended); "low" is far behind.
    top = top_of(cfg, {"best": 4, "cheap": 3, "low": 4})
    means = {"best": 500.0, "cheap": 495.0, "low": 200.0}
    result = run_finish(cfg, top, fake_replayer(means, 12.0, asked))
    counts = {d.key: len(d.samples) for d in result.deployments}
    assert counts["low"] == 4  # shown behind at the first look: no more samples
    assert counts["cheap"] >= counts["best"] > 4 and len(asked) > 1  # contenders paired; the pick topped up
    assert all(not any(name.startswith("low#") for name in batch) for batch in asked[1:])
    from spica_lib.results.confidence import judge

    verdict = judge(result)
    # "cheap" leads on these samples: it is recommended as the observed leader. Within the margin of "best" on 16,
    # too few to rule out a failure on 1 window in 10, it is not called equivalent, and no sample is drawn for a
    # claim that would change nothing.
    first = verdict.ranks[0]
    assert verdict.decided and first.key == "cheap" and first.leader and not first.equivalent
    assert first.too_few_for_rare_events and max(counts.values()) == 16


def test_an_equivalence_that_would_favour_the_cheaper_one_draws_the_rare_event_samples_for_that_pair_alone():
    cfg = config(finish_samples=4, finish_max_samples=16)  # goal.rare_event_share: the default 10 %: 42 samples
    asked = []
    top = top_of(cfg, {"best": 4, "cheap": 2, "low": 4})
    result = run_finish(cfg, top, fake_replayer({"best": 500.0, "cheap": 495.0, "low": 200.0}, 2.0, asked))
    counts = {d.key: len(d.samples) for d in result.deployments}
    assert counts == {"best": 42, "cheap": 42, "low": 4} and result.rare_look == 42
    assert all(name.partition("#")[0] in ("best", "cheap") for batch in asked[1:] for name in batch)
    from spica_lib.results.confidence import judge

    verdict = judge(result)
    first = verdict.ranks[0]
    assert first.key == "cheap" and first.equivalent and not first.leader and verdict.decided
    assert "uses 2 GPUs fewer than #2" in verdict.sentence
    assert "on 42 compared samples a failure on fewer than 1 in 10 traffic windows could go unseen" in verdict.sentence


def test_an_undecided_finish_stops_at_the_cap_and_says_so():
    cfg = config(finish_samples=2, finish_max_samples=4)
    asked = []
    # Very noisy and 4 % apart: 4 samples can neither separate them nor show them within 5 %.
    top = top_of(cfg, {"best": 4, "cheap": 2})
    result = run_finish(cfg, top, fake_replayer({"best": 500.0, "cheap": 480.0}, 80.0, asked))
    assert [len(batch) for batch in asked] == [4, 4] and all(len(d.samples) == 4 for d in result.deployments)
    assert result.stopped.startswith("reached sweep.finish_max_samples (4)")


@pytest.mark.parametrize("first", [1, 3])
def test_every_replay_of_a_look_is_a_new_sample_index(first):
    cfg = config(finish_samples=first, finish_max_samples=4 * first)
    asked = []
    top = top_of(cfg, {"a": 4, "b": 3})
    run_finish(cfg, top, fake_replayer({"a": 500.0, "b": 499.0}, 30.0, asked))
    names = [name for batch in asked for name in batch]
    assert len(names) == len(set(names))  # no sample replayed twice


def test_a_decided_finish_goes_on_while_the_recommendation_s_level_is_imprecise():
    cfg = config(finish_samples=4, finish_max_samples=16)
    asked = []
    # Decided at once (the far one is far behind), but the recommendation's own samples spread by 12 %.
    top = top_of(cfg, {"best": 4, "far": 4})
    result = run_finish(cfg, top, fake_replayer({"best": 500.0, "far": 100.0}, 60.0, asked))
    counts = {d.key: len(d.samples) for d in result.deployments}
    assert counts["far"] == 4 and counts["best"] > 4  # only the recommendation, not the one shown behind
    from spica_lib.results.confidence import judge

    first = judge(result).ranks[0]
    assert first.key == "best" and "standard error" in result.stopped
    assert first.se <= 0.015 * first.statistic or counts["best"] == 16


def test_a_tail_statistic_that_cannot_support_a_claim_within_the_cap_draws_no_comparison_samples_past_its_first_look():
    cfg = build(config_data(goal={"target": "throughput", "robustness": "p10"},
                            sweep={"finish_top": 3, "finish_samples": 4, "finish_max_samples": 16}))  # fmt: skip
    asked = []
    top = top_of(cfg, {"best": 4, "cheap": 2, "low": 4})
    result = run_finish(cfg, top, fake_replayer({"best": 500.0, "cheap": 497.0, "low": 480.0}, 3.0, asked))
    counts = {d.key: len(d.samples) for d in result.deployments}
    assert counts["cheap"] == counts["low"] == 4  # more samples could not decide anything: none drawn for that
    assert result.stopped.startswith("no claim possible after")
    from spica_lib.results.confidence import judge

    verdict = judge(result)
    assert verdict.ranks[0].leader and {r.verdict for r in verdict.ranks} == {"undecided"}
