"""`run_smart_search`: the default sweep from Python, its answer read back typed, a second call a resume."""

import os
import sys

import pandas as pd
import pytest
from conftest import REPO

from spica_lib.api import SearchOutcome, run_smart_search
from spica_lib.api.search import RUN_FOLDER_VARIABLES
from spica_lib.traces.folders import trace_folders
from spica_lib.base.artifacts import read_model
from spica_lib.baselines.model import BaselinesResult
from spica_lib.baselines.plan import BASELINE_SUFFIX
from spica_lib.config import ConfigError
from spica_lib.results.finish import FinishResult, sample_name
from spica_lib.results.finish_share import FinishShare
from spica_lib.results.merge import CandidateRow
from spica_lib.results.stress import StressResult, stress_name
from spica_lib.trial.store import read_trial


def test_run_smart_search_runs_the_default_sweep_and_returns_its_ranking_then_resumes(tmp_path, monkeypatch):
    monkeypatch.delenv("SPICA_WARM_HOST", raising=False)
    environment, folders = {name: os.environ.get(name) for name in RUN_FOLDER_VARIABLES}, trace_folders()
    outcome = run_smart_search(REPO / "config" / "default.yaml", cores=2, workdir=tmp_path)
    # The run's folders (trace scans, resamples) were the sweep's own: they do not outlive it in this process.
    assert {name: os.environ.get(name) for name in RUN_FOLDER_VARIABLES} == environment
    assert trace_folders() == folders
    assert isinstance(outcome, SearchOutcome) and all(isinstance(row, CandidateRow) for row in outcome.ranked)
    assert outcome.run_dir.parent == tmp_path / "results"
    ranked = pd.read_csv(outcome.run_dir / "ranked.csv")
    assert [row.key for row in outcome.ranked] == list(ranked["key"])  # the files' order, best first
    assert outcome.best.finish is not None and outcome.best.finish.recommended  # the finish's recommendation
    assert outcome.summary.best_score == pytest.approx(outcome.best.finish.statistic)
    # aiconfigurator's pick is sized to the default's 8 req/s, not to its 8-GPU budget, and the
    # baseline line says in absolute terms what the ratio compares.
    pick = next(b for b in outcome.summary.baselines if b.name == "aiconfigurator")
    assert pick.gpus < 8 and f"tok/s goodput on {pick.gpus} GPUs" in outcome.summary.line
    readme_shows_this_run(outcome)
    finish_shares_are_the_finish_s_own_samples(outcome.run_dir)
    trials = {p: p.stat().st_mtime_ns for p in outcome.run_dir.glob("rounds/*/*/trials/*/*.json")}
    again = run_smart_search(REPO / "config" / "default.yaml", workdir=tmp_path)
    assert again == outcome  # resumed: nothing left to do, the same answer
    assert {p: p.stat().st_mtime_ns for p in outcome.run_dir.glob("rounds/*/*/trials/*/*.json")} == trials


def finish_shares_are_the_finish_s_own_samples(run_dir):
    """Each branch's share of the finish (results/finish_share.py) replayed a prefix of its plan; a sample of the
    finish or a stress replay with a name a share replayed is that replay, restored from the journal (the same
    spec, the same result)."""
    finish = read_model(run_dir / "finish.json", FinishResult)
    stress = read_model(run_dir / "stress.json", StressResult)
    shares = [read_model(path, FinishShare) for path in sorted((run_dir / "finish_shares").glob("*.json"))]
    assert sorted(share.branch for share in shares) == ["agg", "disagg"]
    samples = {sample_name(d.key, s.index): s for d in finish.deployments for s in d.samples}
    samples.update({stress_name(s.key, s.perturbation): s for s in stress.scores if s.status != "skipped"})
    for share in shares:
        assert share.replayed == share.planned[: len(share.replayed)] and share.stopped
        for name in share.replayed:
            journaled = read_trial(run_dir / "journal" / f"{name}.json").result
            if name in samples:
                assert samples[name].status == journaled.status
                if journaled.status == "feasible":
                    assert samples[name].score == journaled.score
            elif name.endswith(BASELINE_SUFFIX):  # aiconfigurator's pick, replayed ahead: the baseline restored it
                pick = next(b for b in read_model(run_dir / "baselines.json", BaselinesResult).baselines
                            if b.name == "aiconfigurator")  # fmt: skip
                assert pick.source == "replayed" and f"{pick.key}{BASELINE_SUFFIX}" == name and pick.result == journaled


def test_a_bad_config_raises_before_anything_runs(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("search_space: {model_name: Qwen/Qwen3-32B, hardware_sku: h200_sxm, total_gpus: -1}\n")
    with pytest.raises(ConfigError, match="total_gpus"):
        run_smart_search(bad, workdir=tmp_path)
    assert not (tmp_path / "results").exists()


def readme_shows_this_run(outcome):
    """The README's example (bench/readme_example.py) is this sweep's top: same deployments, same
    order, same GPUs, scores within 3 % (a KV-router or planner replay may differ by a little)."""
    sys.path.insert(0, str(REPO / "bench"))
    from readme_example import BEGIN, END, top_table

    readme = (REPO / "README.md").read_text()
    shown = [row for row in readme[readme.index(BEGIN) : readme.index(END)].splitlines() if row.startswith("|")]
    report = (outcome.run_dir / "report" / "report.md").read_text()
    ran = top_table(report, len(shown) - 2)
    assert len(shown) > 2 and len(ran) == len(shown)
    header = [cell.strip() for cell in ran[0].split("|")]
    assert [cell.strip() for cell in shown[0].split("|")] == header, "rerun bench/readme_example.py"
    same = [header.index(name) for name in ("#", "deployment", "GPUs")]
    score = header.index("fresh mean") if "fresh mean" in header else header.index("search score")
    for readme_row, run_row in zip(shown[2:], ran[2:]):
        a, b = readme_row.split("|"), run_row.split("|")
        assert [a[i] for i in same] == [b[i] for i in same], "rerun bench/readme_example.py"
        if a[score].strip() != "—":
            assert float(a[score].split()[0]) == pytest.approx(float(b[score].split()[0]), rel=0.03)
