"""The real Snakemake workflow: stages run, reruns do nothing, bad configs write nothing."""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from conftest import REPO, TRACE, config_data, write_yaml

from spica_lib.base.artifacts import read_model
from spica_lib.config.policies import PolicyFilter
from spica_lib.config.validate import ValidatedConfig
from spica_lib.pools.branches import BranchSpec
from spica_lib.pools.table import read_pool

pytestmark = pytest.mark.slow
SNAKEMAKE = [sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "workflow" / "Snakefile"), "--cores", "2"]


PRE_SEARCH = ("branches", "load_predictor")  # rule names as targets: every stage before the search


def snakemake(
    workdir: Path, *args: str, targets: tuple[str, ...] = PRE_SEARCH, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    command = [*SNAKEMAKE, *targets, "--directory", str(workdir), *args]
    return subprocess.run(
        command, capture_output=True, text=True, check=False, timeout=900, env={**os.environ, **(env or {})}
    )


def test_default_config_runs_the_first_stages_and_a_rerun_does_nothing(tmp_path):
    config = REPO / "config" / "default.yaml"
    first = snakemake(tmp_path, "--config", f"spica={config}")
    assert first.returncode == 0, first.stderr
    runs = list((tmp_path / "results").iterdir())
    assert len(runs) == 1
    validated = read_model(runs[0] / "config.json", ValidatedConfig)
    assert validated.run == runs[0].name == validated.config_sha256[:12]
    policies = read_model(runs[0] / "policies.json", PolicyFilter)
    assert policies.kept == validated.config.search_space.planner_scaling_policy
    assert (runs[0] / "logs" / "validate.log").read_text()
    for mode in ("agg", "disagg"):
        spec = read_model(runs[0] / "branches" / mode / "branch.json", BranchSpec)
        pool = read_pool(runs[0] / "branches" / mode / "pool.parquet", mode)
        assert spec.status == "ready" and len(pool) == spec.pool_size > 0
        assert all(record.config.total_gpus <= validated.config.search_space.gpu_budget for record in pool)

    again = snakemake(tmp_path, "--config", f"spica={config}")
    assert again.returncode == 0 and "Nothing to be done" in again.stdout + again.stderr


def test_configfile_form_and_run_name(tmp_path):
    path = write_yaml(
        tmp_path,
        config_data(
            goal={"target": "throughput"}, search_space={"planner_scaling_policy": ["disabled", "throughput_180_5"]}
        ),
    )
    done = snakemake(tmp_path, "--configfile", str(path), "--config", "run=mine")
    assert done.returncode == 0, done.stderr
    policies = json.loads((tmp_path / "results" / "mine" / "policies.json").read_text())
    assert policies["kept"] == ["disabled"] and policies["dropped"][0]["label"] == "throughput_180_5"


def test_bad_config_stops_before_any_job_and_writes_nothing(tmp_path):
    path = write_yaml(tmp_path, config_data(search_space={"gpu_budget": 0}))
    done = snakemake(tmp_path, "--config", f"spica={path}")
    assert done.returncode != 0
    assert "search_space.gpu_budget" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "results").exists()


def test_dry_run_lists_the_stages(tmp_path):
    done = snakemake(tmp_path, "--config", f"spica={REPO / 'config' / 'default.yaml'}", "-n", targets=())
    assert done.returncode == 0, done.stderr
    for stage in ("validate", "policies", "branches", "load_predictor", "suggest", "tell", "merge"):
        assert stage in done.stdout
    assert not (tmp_path / "results").exists()


def test_a_config_no_layout_fits_stops_snakemake_before_any_job(tmp_path):
    too_small = {"model_name": "deepseek-ai/DeepSeek-V3", "backend": ["sglang"], "gpu_budget": 2}
    path = write_yaml(tmp_path, config_data(search_space=too_small))
    done = snakemake(tmp_path, "--config", f"spica={path}")
    assert done.returncode == 2
    assert "search_space.deployment_mode: 'agg' has no viable layout" in done.stderr
    assert not (tmp_path / "results").exists()


def test_load_predictor_stage_scores_each_candidate_as_its_own_job_and_resumes_leaving_no_temporary_file(tmp_path):
    candidates = ["constant_last", "kalman_reactive_raw", "arima_raw", "prophet_w20_raw"]
    policy = {
        "enable_throughput_scaling": True,
        "enable_load_scaling": False,
        "throughput_adjustment_interval_seconds": 60,
        "load_adjustment_interval_seconds": None,
    }
    data = config_data(
        search_space={
            "deployment_mode": ["agg"],
            "gpu_budget": 2,
            "planner_scaling_policy": ["disabled", policy],
            "load_predictor_candidates": candidates,
        },
        workload={"isl": None, "osl": None, "request_rate": None, "num_request_ratio": None, "trace_path": str(TRACE)},
    )
    data["goal"] = {"target": "goodput", "sla": {"ttft_ms": 2000, "itl_ms": 50}}
    path = write_yaml(tmp_path, data)
    temporary = tmp_path / "tmp"  # the jobs import Dynamo's planner, whose import once left files here
    temporary.mkdir()
    done = snakemake(
        tmp_path, "--config", f"spica={path}", "run=lp", targets=("load_predictor",), env={"TMPDIR": str(temporary)}
    )
    assert done.returncode == 0, done.stderr
    assert list(temporary.iterdir()) == []
    run = tmp_path / "results" / "lp"
    result = json.loads((run / "load_predictor.json").read_text())
    assert result["reason"] == "swept" and result["best_by_interval"]["60"] in candidates
    table = pd.read_parquet(run / "load_predictor.parquet")
    assert sorted(table["preset"]) == sorted(candidates) and table["winner"].sum() == 1
    assert table["loss"].map(math.isfinite).all() and (table["windows_scored"] > 0).all()
    scores = sorted((run / "load_predictor" / "scores" / "60").glob("*.json"))
    assert len(scores) == 4
    kept = {p.name: p.stat().st_mtime_ns for p in scores if p.name != "arima_raw.json"}
    # As if the run was killed after three candidates were scored: one score and the merge are missing.
    for lost in (
        run / "load_predictor" / "scores" / "60" / "arima_raw.json",
        run / "load_predictor.json",
        run / "load_predictor.parquet",
    ):
        lost.unlink()
    again = snakemake(tmp_path, "--config", f"spica={path}", "run=lp", targets=("load_predictor",))
    assert again.returncode == 0, again.stderr
    assert "load_predictor_score" in again.stdout + again.stderr
    assert {
        p.name: p.stat().st_mtime_ns for p in scores if p.name != "arima_raw.json"
    } == kept  # only the lost one rescored
    assert json.loads((run / "load_predictor.json").read_text()) == result


def test_a_cluster_job_gets_the_time_of_every_workload_it_replays(tmp_path, monkeypatch):
    from spica_lib.run.layout import prepare_run
    from spica_lib.run.time_limits import replay_job_minutes

    monkeypatch.chdir(tmp_path)
    two = prepare_run(str(REPO / "config" / "examples" / "two_workloads.yaml"))
    one = prepare_run(str(REPO / "config" / "default.yaml"))
    assert (two.workloads, one.workloads) == (2, 1)
    # 4 trials, 2 at a time, 5-minute limit: 2 waves on one workload, 4 on two, plus the job's margin.
    assert replay_job_minutes(4, one.workloads, 2, 300) == 2 * 5 + 5
    assert replay_job_minutes(4, two.workloads, 2, 300) == 4 * 5 + 5
    assert replay_job_minutes(3, 2, 4, None) == 2 * 60 + 5  # no limit: an hour per replay


def test_a_cluster_job_asks_for_the_memory_its_largest_trace_needs(tmp_path, monkeypatch):
    from spica_lib.run.job_memory import FLOOR_MB_PER_REPLAY, replay_mb
    from spica_lib.run.layout import prepare_run

    monkeypatch.chdir(tmp_path)
    # The shipped trace (61 M input tokens) and the default synthetic workload fit the floor.
    synthetic = {"isl": None, "osl": None, "request_rate": None, "num_request_ratio": None}
    data = config_data(workload={"trace_path": str(TRACE), **synthetic})
    assert prepare_run(str(write_yaml(tmp_path, data))).replay_mb == FLOOR_MB_PER_REPLAY
    assert prepare_run(str(REPO / "config" / "default.yaml")).replay_mb == FLOOR_MB_PER_REPLAY
    # A day of it: 100k requests (1.5 G tokens) measured at 6.2 GiB, 500k (7.7 G) past 24 GiB.
    assert 6.2 * 2**30 < replay_mb(1_532_814_016) * 1e6 < 9 * 2**30
    assert replay_mb(7_675_027_057) * 1e6 > 30 * 2**30


@pytest.mark.slow
def test_a_local_sweep_whose_replay_outgrows_the_machine_stops_before_any_job(tmp_path):
    import psutil

    data = config_data()
    data["workload"]["num_request_ratio"] = 10**7  # 80 M requests of 2,048 tokens: some 840 GB per replay
    config = write_yaml(tmp_path, data)
    done = subprocess.run([sys.executable, "-m", "spica_lib.cli", "run", str(config), "--cores", "1"], cwd=tmp_path,
                          capture_output=True, text=True, check=False, timeout=300)  # fmt: skip
    assert done.returncode == 2, done.stderr[-2000:]
    assert "one replay of the whole traffic needs about" in done.stderr
    assert f"this machine has {psutil.virtual_memory().total // 10**6} MB" in done.stderr
    assert not (tmp_path / "results").exists()  # nothing started, nothing written


def test_a_replay_no_machine_or_partition_can_hold_is_refused_with_the_size_it_needs():
    from spica_lib.run.job_memory import JobAsk, cluster_refusal, largest_node_mb, machine_refusal

    assert machine_refusal(39_700, 64_000) is None
    assert "needs about 39700 MB" in machine_refusal(39_700, 24_000) and "has 24000 MB" in machine_refusal(39_700, 24_000)
    # sinfo -h -N -o "%P %m": one line per node and partition, the default marked *, a range's floor with +.
    listed = ["cpu* 64000", "cpu* 128000+", "big 512000", "gpu n/a"]
    assert (largest_node_mb(listed, None), largest_node_mb(listed, "cpu"), largest_node_mb(listed, "big")) == (
        128_000, 128_000, 512_000)  # fmt: skip
    assert largest_node_mb(listed, "gpu") is None and largest_node_mb(listed, "absent") is None
    nodes = {None: 128_000, "cpu": 128_000, "big": 512_000}.get
    fits = {"replay": JobAsk(4000, None, 2, 2000), "finish": JobAsk(80_000, "cpu", 2, 40_000)}
    assert cluster_refusal(fits, nodes) is None
    two = cluster_refusal({**fits, "finish": JobAsk(160_000, "cpu", 4, 40_000)}, nodes)
    assert "the finish job asks SLURM for 160000 MB" in two and "partition cpu has 128000 MB" in two
    assert "set-threads finish: 3" in two  # three of its 40,000 MB replays fit the node
    whole = cluster_refusal({"stress": JobAsk(300_000, None, 1, 300_000)}, nodes)
    assert "default partition has 128000 MB" in whole and "alone needs about 300000 MB" in whole
    asked = cluster_refusal({"finish": JobAsk(200_000, "cpu", 2, 40_000)}, nodes)
    assert "lower set-resources finish:mem_mb" in asked and "need about 80000 MB" in asked
    assert cluster_refusal({"finish": JobAsk(10**6, "unknown", 1, 4000)}, nodes) is None  # not known: not judged
