"""No stall: a proposal that lands on a trial already replayed (or replaying) moves to the nearest one not taken.

The round logic runs with the real Vizier (and, where the designer itself is under test, a fake designer named
so) and the fake replay of tests/test_search_loop.py: these test our own control flow.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import build, config_data
from test_search_loop import FakeReplay, branch, knobs, layout, record

from spica_lib.search import rounds
from spica_lib.search.in_process import run_search
from spica_lib.search.rounds import SearchContext
from spica_lib.search.space import BranchSpace

pytestmark = pytest.mark.slow  # imports Vizier (JAX)

POOL = [record(layout(1, r)) for r in range(1, 9)]  # 1..8 replicas of TP1: FakeReplay scores the most GPUs best


class FakeRepeatingDesigner:
    """Fake designer (control flow only): proposes the same point, the one-GPU layout, whatever it is told."""

    def __init__(self, point):
        self.point = point

    def update(self, completed, active):
        pass

    def suggest(self, count):
        from vizier import pyvizier as vz

        return [vz.TrialSuggestion(parameters=self.point) for _ in range(count)]


def repeating(monkeypatch, pool=POOL):
    """The branch of `pool` (one engine setting), its rounds asking the fake designer."""
    monkeypatch.setattr(rounds, "make_designer", lambda *_: FakeRepeatingDesigner({"used_gpu_ratio": 1 / 8}))
    return branch(pool, knobs(agg_max_num_seqs=[256]))


def sweep(spec, rounds_, per_round, in_flight=1, seed=3, algorithm="random", pool=POOL):
    data = config_data(sweep={"algorithm": algorithm, "candidates_per_round": per_round, "max_rounds": rounds_,
                              "seed": seed, "warm_start": False, "rounds_in_flight": in_flight})  # fmt: skip
    store, replay = {}, FakeReplay()
    history, passes = run_search(SearchContext(config=build(data)), spec, pool, store, replay)
    return history, passes, store, replay


@pytest.mark.parametrize("in_flight", [1, 2], ids=["rounds one at a time", "2 rounds in flight"])
def test_a_designer_that_repeats_a_replayed_layout_still_reaches_the_best_one(monkeypatch, in_flight):
    spec = repeating(monkeypatch)
    history, passes, store, replay = sweep(spec, 4, 2, in_flight)
    # 8 proposals of the one-GPU layout: one replays it, each other moves one layout further out.
    replayed = sorted(record.spec.used_gpus for record in store.values())
    assert replayed == list(range(1, 9)) and replay.calls == 8 and not history.stalled
    assert max(store.values(), key=lambda r: r.result.score).spec.used_gpus == 8  # the pool's best
    pairs = [(item, p) for round_passes in passes for p in round_passes for item in p.suggested]
    items = [item for item, _ in pairs]
    moved = [(item, p) for item, p in pairs if item.outcome == "moved"]
    assert len(moved) == 7 and sum(t.moved for t in history.tallies) == 7
    space = BranchSpace(spec, POOL)
    for item, pass_ in moved:
        # Recorded as what it is: the proposal it was moved from (in the same pass) stays a cached or duplicate
        # suggestion of the one-GPU trial, and the moved trial's parameters are the point of the layout it replays.
        origin = next(i for i in pass_.suggested if i.vizier_id == item.moved_from)
        assert origin.outcome in ("cached", "duplicate") and origin.layout == layout(1, 1).label()
        assert origin.params["used_gpu_ratio"] == pytest.approx(1 / 8) and origin.layout in item.reason
        assert space.decode(item.params).parallel_config.label() == item.layout != origin.layout
    # The designer was told each proposal with the result it really has: the repeats as cache hits of the
    # one-GPU trial, every moved trial with its own layout's score.
    one_gpu = next(r.result.score for r in store.values() if r.spec.used_gpus == 1)
    repeats = [o for o in history.observations if o.status == "cache_hit"]
    assert len(repeats) == 7 and all(o.metrics["objective"] == one_gpu for o in repeats)
    assert all(any(o.key == i.key and o.status == "feasible" for o in history.observations) for i, _ in moved)
    # Rounds in flight: a trial still replaying in another round counts as taken (never replayed twice).
    assert len({item.key for item in items if item.outcome in ("new", "moved")}) == 8


def test_the_moves_go_nearest_first_by_the_projection_distance(monkeypatch):
    _, passes, _, _ = sweep(repeating(monkeypatch), 3, 2)
    moved = [i for round_passes in passes for p in round_passes for i in p.suggested if i.outcome == "moved"]
    assert [i.layout for i in moved] == [layout(1, r).label() for r in range(2, 7)]
    distances = [i.projection_distance for i in moved]  # from the point the designer asked for
    assert distances == sorted(distances) and distances[0] > 0


def test_a_pool_with_every_layout_taken_still_stalls(monkeypatch):
    pool = POOL[:3]
    history, _, store, _ = sweep(repeating(monkeypatch, pool), 3, 2, pool=pool)
    assert len(store) == 3 and history.stalled and "round 1" in history.stall_reason


def moves_sweep() -> str:
    """A real NSGA-II sweep, 2 rounds in flight, on a pool small enough that it repeats itself: every pass as JSON."""
    pool = [record(layout(1, r)) for r in (1, 2, 3, 4, 6, 8)]
    spec = branch(pool, knobs(agg_max_num_seqs=[256, 512]))
    _, passes, _, _ = sweep(spec, 6, 2, in_flight=2, seed=11, algorithm="nsga2", pool=pool)
    return json.dumps([[p.model_dump(mode="json", exclude={"optimizer_seconds"}) for p in r] for r in passes])


def test_the_same_seed_gives_the_same_moves_in_another_process():
    here = moves_sweep()
    assert any(item["outcome"] == "moved" for r in json.loads(here) for p in r for item in p["suggested"])
    tests = Path(__file__).parent
    script = "import sys; sys.path.insert(0, sys.argv[1]); import test_search_moves as t; print(t.moves_sweep())"
    env = {**os.environ, "PYTHONHASHSEED": "12345"}  # another set and dict order than this process's
    child = subprocess.run(
        [sys.executable, "-c", script, str(tests)], capture_output=True, text=True, env=env, check=True, timeout=600
    )
    assert json.loads(child.stdout.strip().splitlines()[-1]) == json.loads(here)


class FakeSequenceDesigner:
    """Fake designer (control flow only): proposes the given points in order, whatever it is told."""

    def __init__(self, points):
        self.points = list(points)

    def update(self, completed, active):
        pass

    def suggest(self, count):
        from vizier import pyvizier as vz

        taken, self.points = self.points[:count], self.points[count:]
        return [vz.TrialSuggestion(parameters=point) for point in taken]


def sequence_sweep(monkeypatch, per_round):
    # Ever fewer GPUs, each at the first max_num_seqs (256): the designer never varies the best layout's knobs.
    points = [{"used_gpu_ratio": r / 8} for r in range(8, 0, -1)] * 2
    designer = FakeSequenceDesigner(points)
    monkeypatch.setattr(rounds, "make_designer", lambda *_: designer)
    spec = branch(POOL, knobs(agg_max_num_seqs=[256, 512, 1024]))
    return sweep(spec, 4, per_round)


def test_each_round_spends_one_slot_on_the_best_trials_other_knob_values_nearest_first(monkeypatch):
    history, passes, store, _ = sequence_sweep(monkeypatch, per_round=2)
    items = {p.round: [i for i in p.suggested] for round_passes in passes for p in round_passes}
    refined = {r: [i for i in round_items if i.refines is not None] for r, round_items in items.items()}
    assert refined[0] == []  # no best before round 0's results
    # Round 1: the best (8 GPUs, 256 seqs) at the nearest other value; round 2: the new best (512) at the one left.
    assert [i.selection["agg_max_num_seqs"] for r in (1, 2) for i in refined[r]] == [512, 1024]
    assert all(i.outcome == "new" and i.layout == layout(1, 8).label() for r in (1, 2) for i in refined[r])
    told = {o.vizier_id: o for o in history.observations}
    assert told[refined[1][0].refines].key != told[refined[2][0].refines].key  # each round's own best
    assert told[refined[2][0].refines].key == refined[1][0].key
    # Round 3: the best's knob line is done; both slots are the designer's.
    assert refined[3] == [] and sum(i.outcome in ("new", "moved") for i in items[3]) == 2
    best = max(store.values(), key=lambda r: r.result.score)
    assert (best.spec.used_gpus, best.spec.sample["agg_max_num_seqs"]) == (8, 1024)


def test_a_round_of_one_candidate_stays_the_designers(monkeypatch):
    _, passes, _, _ = sequence_sweep(monkeypatch, per_round=1)
    assert all(i.refines is None for round_passes in passes for p in round_passes for i in p.suggested)
