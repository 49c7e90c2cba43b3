"""The noise-aware finish: the top KV-router deployments replayed again and ranked by their mean."""

import json
import subprocess
import sys

import pandas as pd
import pytest
import yaml
from conftest import REPO, build, config_data, rejected, write_yaml

from spica_lib.base.artifacts import read_model
from spica_lib.results.finish import FinishedDeployment, FinishResult, overlapping
from spica_lib.results.merge import CandidateRow, apply_finish
from spica_lib.trial.score import Candidate

SPICA = [sys.executable, "-m", "spica_lib.cli", "run"]


def row(key, score, gpus=4):
    candidate = Candidate(config={}, used_gpus=gpus, score=score, metrics={})
    return CandidateRow(key=key, branch="agg", round=0, candidate=candidate, average_gpus=gpus)


def test_the_finished_top_is_ranked_by_its_mean_and_the_rest_keeps_its_order():
    best = [row("a", 10.0), row("b", 9.9), row("c", 9.0), row("d", 8.0)]
    finish = FinishResult(
        repeats=3,
        deployments=[
            FinishedDeployment(key="a", scores=[10.0, 9.0, 9.1]),  # a lucky first replay
            FinishedDeployment(key="b", scores=[9.9, 9.8, 10.0]),
            FinishedDeployment(key="c", scores=[9.0]),  # round robin: replayed once
        ],
    )
    ranked = apply_finish(best, finish)
    assert [r.key for r in ranked] == ["b", "a", "c", "d"]
    assert ranked[0].finish.mean == pytest.approx(9.9) and ranked[3].finish is None
    assert overlapping(finish.deployments) == {"a": ["b", "c"], "b": ["a"], "c": ["a"]}


def test_finish_repeats_must_be_at_least_one_and_does_nothing_for_a_pareto_goal():
    rejected(config_data(sweep={"finish_repeats": 0}), "sweep.finish_repeats", "greater than or equal to 1")
    data = config_data(goal={"target": "pareto"}, sweep={"finish_repeats": 3})
    data["workload"] = {"isl": 1024, "osl": 128, "kv_load_ratio": 0.5, "num_request_ratio": 10}
    rejected(data, "", "a 'pareto' goal has a front")
    assert build(config_data(sweep={"finish_repeats": 1})).sweep.finish_repeats == 1  # 1: no finish


def test_finish_repeats_without_a_kv_router_in_the_space_does_nothing_and_is_refused():
    exact = {"router_mode": ["round_robin"]}
    rejected(config_data(search_space=exact, sweep={"finish_repeats": 3}), "", "has no kv_router")
    config = build(config_data(search_space=exact))
    assert config.sweep.finish_repeats is None  # left out: nothing to repeat
    assert build(config.model_dump(mode="json")) == config  # the normalised config reads back


@pytest.mark.slow
def test_a_sweep_replays_its_top_kv_router_deployments_again_and_ranks_them_by_their_mean(tmp_path):
    data = yaml.safe_load((REPO / "config" / "examples" / "pinned_parallel.yaml").read_text())
    data["search_space"]["parallel_configs"] = [{"tp": 2, "replicas": 2}, {"tp": 1, "replicas": 4}]
    data["search_space"]["router_mode"] = ["kv_router"]  # two or more workers: the router really chooses
    data["workload"]["num_request_ratio"] = 20
    data["sweep"].update(max_rounds=1, candidates_per_round=3, top_k=2, finish_repeats=3)
    path = write_yaml(tmp_path, data)
    done = subprocess.run([*SPICA, str(path)], cwd=tmp_path, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    run = next((tmp_path / "results").iterdir())
    finish = read_model(run / "finish.json", FinishResult)
    assert len(finish.deployments) == 2 and all(d.replays == 3 for d in finish.deployments)
    trials = {
        json.loads(p.read_text())["key"]: json.loads(p.read_text()) for p in run.glob("rounds/*/*/trials/*/*.json")
    }
    for deployment in finish.deployments:  # the search's own replay comes first
        assert deployment.scores[0] == trials[deployment.key]["result"]["score"]
    ranked = pd.read_csv(run / "ranked.csv")
    top = ranked.head(2)
    assert list(top["finish_replays"]) == [3, 3]
    assert top["finish_mean"].is_monotonic_decreasing
    assert set(top["key"]) == {d.key for d in finish.deployments}
    assert ranked["finish_mean"].iloc[2:].isna().all()
    assert (
        "replayed 3 times (it breaks ties at random) and are ranked by their mean"
        in (run / "report" / "report.md").read_text()
    )
