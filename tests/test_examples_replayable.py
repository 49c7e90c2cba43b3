"""Every shipped config suggests only candidates the replay can run (real Vizier, real replays).

Each config of `config/examples/` and `config/default.yaml` is searched for one round of 4 candidates
per branch by the random designer, without the warm start (it roams the whole pool, where the warm
start and a guided designer stay near the estimate's best), through the sweep's own round logic, and
no replay may fail (refills included: a failure would be replaced, and show here all the same). A config that cannot avoid a
failure changes, not this check.
"""

import os
from pathlib import Path

import pytest
from conftest import sweep_examples

from spica_lib.config import SmartSearchConfig, read_yaml_mapping
from spica_lib.facts.kv_capacity import KvEstimator
from spica_lib.pools.branches import enumerate_branches
from spica_lib.search.in_process import run_round
from spica_lib.search.rounds import SearchContext
from spica_lib.trial.evaluate import evaluate_trials

pytestmark = pytest.mark.slow

CONFIGS = sweep_examples()  # the fleet example's models are swept by tests/test_fleet_workflow.py's kind of run
ROUNDS, PER_ROUND = 1, 4


def small_search(path: Path) -> SmartSearchConfig:
    data = read_yaml_mapping(path)
    budget = {"max_rounds": ROUNDS, "candidates_per_round": PER_ROUND, "algorithm": "random", "seed": 5}
    budget["warm_start"] = False
    data["sweep"] = {**(data.get("sweep") or {}), **budget}
    return SmartSearchConfig.from_mapping(data, base_dir=path.resolve().parent)


def replayed(config: SmartSearchConfig):
    def replay(spec):
        # warm: the perf DBs load once in this process, and every replay's child is forked warm from it
        replays = evaluate_trials({spec.key(): spec}, max_eval_seconds=config.sweep.max_eval_seconds, warm=True)
        return next(result for _, result in replays)

    return replay


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.stem)
def test_a_small_search_of_each_shipped_config_has_no_failed_replay(path, tmp_path, monkeypatch):
    os.environ.setdefault("DYN_LOG", "error")
    monkeypatch.setenv("SPICA_TRACE_SPLITS", str(tmp_path / "splits"))  # the trace example's held-out split
    config = small_search(path)
    space = config.search_space
    outcomes = {}
    for branch in enumerate_branches(config):
        context = SearchContext(
            config=config, estimator=KvEstimator(space.model_name, space.hardware_sku, branch.spec.backend_versions)
        )
        history, store = None, {}
        for k in range(ROUNDS):
            history, _ = run_round(context, branch.spec, branch.pool, k, history, store, replayed(config))
        outcomes.update({key: record.result for key, record in store.items()})
        told = [o for o in history.observations if o.status == "failed"]
        assert not told, [o.reason for o in told]
    failed = {key: r.reason for key, r in outcomes.items() if r.status == "failed"}
    assert outcomes and not failed
