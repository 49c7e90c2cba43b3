"""Every shipped config's candidates deploy as replayed: no document a cluster would reject, no setting lost.

Deployment files need a trial's spec, not its replay, so no replay runs here: for each branch of
`config/default.yaml` and every `config/examples/*.yaml`, and each backend of the branch, a few
candidates spread over the pool and over every searched knob's values (router, planner policy,
engine limits) are unrolled exactly as the search would (`prepare_trial`) and written as
`deploy/<rank>/` by the real generator.
"""

import os
from pathlib import Path

import pytest
import yaml
from conftest import sweep_examples

from spica_lib.config import SmartSearchConfig
from spica_lib.deploy.k8s_check import document_problems
from spica_lib.deploy.release import installed_release
from spica_lib.deploy.top import BENCH_FILE, DGD_FILE, write_deployment
from spica_lib.facts.kv_capacity import KvEstimator
from spica_lib.pools.branches import enumerate_branches
from spica_lib.search.space import BranchSpace
from spica_lib.trial.evaluate import prepare_trial
from spica_lib.trial.kv_load import InfeasibleKVCapacity
from spica_lib.trial.spec import TrialRecord, TrialResult

pytestmark = pytest.mark.slow

CONFIGS = sweep_examples()  # the fleet example's models are swept by tests/test_fleet_workflow.py's kind of run
PER_BACKEND = 3  # candidates per branch and backend


def candidates(config: SmartSearchConfig):
    """(selection, layout, backend version) spread over each branch's pool and every knob's values."""
    space_ = config.search_space
    for branch in enumerate_branches(config):
        space = BranchSpace(branch.spec, branch.pool)
        base = space.decode(space.complete({})).values
        estimator = KvEstimator(space_.model_name, space_.hardware_sku, branch.spec.backend_versions)
        for backend in branch.spec.backend_versions:
            pool = [record for record in branch.pool if backend in record.backends]
            for i in range(min(PER_BACKEND, len(pool))):
                values = {**base, "backend": backend}
                searched = [(n, c) for n, c in branch.spec.knob_choices.items() if len(c) > 1 and n != "backend"]
                for j, (name, choices) in enumerate(searched):
                    values[name] = choices[(i + j) % len(choices)]
                layout = pool[(i * len(pool)) // PER_BACKEND].config
                yield values, layout, branch.spec.backend_versions[backend], estimator


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.stem)
def test_each_shipped_config_deploys_its_candidates_as_replayed(path: Path, tmp_path, monkeypatch):
    os.environ.setdefault("DYN_LOG", "error")
    monkeypatch.setenv("SPICA_TRACE_SPLITS", str(tmp_path / "splits"))  # the trace example's held-out split
    config = SmartSearchConfig.from_yaml(path)
    written = 0
    for rank, (values, layout, version, estimator) in enumerate(candidates(config), start=1):
        try:
            spec = prepare_trial(config, values, layout, backend_version=version, estimator=estimator)
        except InfeasibleKVCapacity:
            continue  # the search answers these without a replay: no deployment
        record = TrialRecord(key=spec.key(), spec=spec, result=TrialResult(status="feasible", used_gpus=spec.used_gpus))
        files = write_deployment(tmp_path / str(rank), rank, record, config, run=path.stem)
        assert files.error is None and files.differences == [], (values, files.error, files.differences)
        documents = [
            *yaml.safe_load_all((tmp_path / str(rank) / DGD_FILE).read_text()),
            *yaml.safe_load_all((tmp_path / str(rank) / BENCH_FILE).read_text()),
        ]
        assert [p for d in documents for p in document_problems(d)] == []
        assert all(image.endswith(f":{installed_release().version}") for image in files.images)
        written += 1
    assert written >= 2
