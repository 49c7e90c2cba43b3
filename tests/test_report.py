"""What a sweep hands back: report.md and plots (checked at the data level), deployment files,
the manifest, and `spica status` / `show` / `report` — on real sweeps of the real replay."""

import json
import re
import subprocess
import sys

import pandas as pd
import pytest
import yaml
from conftest import REPO, SPICA_RUN, TRACE, default_config, snakemake_log, sweep

from spica_lib.base.artifacts import read_model
from spica_lib.baselines.model import BaselinesResult
from spica_lib.cli.main import main
from spica_lib.config.narrow import narrowed
from spica_lib.config.validate import ValidatedConfig
from spica_lib.deploy.dgd import components_by_role, main_container
from spica_lib.deploy.k8s_check import document_problems
from spica_lib.deploy.replayed import replayed
from spica_lib.deploy.settings import differences
from spica_lib.deploy.top import DeploymentFiles
from spica_lib.report.manifest import RunManifest
from spica_lib.results.ranking import pareto_front
from spica_lib.run.answer import answer_block
from spica_lib.run.status import BranchStatus, RunStatus, progress_text, run_status, status_text
from spica_lib.run.view import RunView
from spica_lib.trial.store import read_trial

pytestmark = pytest.mark.slow
def test_a_sweep_writes_the_report_its_plots_the_manifest_and_top_k_deployments(default_run):
    run, done = default_run
    assert {p.name for p in (run / "report").iterdir()} == {"report.md", "tradeoff.png", "convergence.png",
                                                            "latency.png"}  # fmt: skip
    text = (run / "report" / "report.md").read_text()
    assert "goodput_per_gpu" in text and "mean_ttft_ms ≤ 2000 ms" in text and "## Top deployments" in text
    # One column for every row's search-sample score, one for the fresh mean of the finished rows only.
    top = text.split("## Top deployments")[1].split("###")[0]
    header = next(line for line in top.splitlines() if line.startswith("| # |"))
    columns = [cell.strip() for cell in header.split("|")]
    assert "search score" in columns and "fresh mean" in columns and "within SLA" in columns
    fresh = columns.index("fresh mean")
    table = [line.split("|") for line in top.splitlines() if line.startswith("| ") and "·" in line]
    finished = [row for row in table if row[fresh].strip() != "—"]
    assert len(finished) == 4 and table[: len(finished)] == finished and len(table) > 4  # the finished top first
    ranks = sorted(p.name for p in (run / "deploy").iterdir() if not p.name.startswith("."))  # Snakemake stamps
    assert ranks == ["1", "2", "3"]  # sweep.top_k defaults to 3
    manifest = read_model(run / "manifest.json", RunManifest)
    validated = read_model(run / "config.json", ValidatedConfig)
    assert manifest.versions["ai-dynamo"] == "1.5.1" and manifest.perf_db_versions == validated.catalog.perf_db_versions
    assert manifest.sha256["config_normalised"] == validated.config_sha256 and manifest.sha256["lock"]
    assert manifest.started_at <= manifest.finished_at and manifest.seed == validated.config.sweep.seed
    # Not a terminal: one progress line per told round, naming the branch, the round and the best so far.
    rounds = [line for line in done.stdout.splitlines() if re.search(r"\] (agg|disagg) +round \d/3 ", line)]
    assert len(rounds) == 6 and "round 3/3 · trials 12 of ~12" in rounds[-1]  # three rounds of two branches


def test_the_plots_show_the_candidates_the_sla_misses_and_the_best_so_far(default_run):
    run, _ = default_run
    view = RunView(run)
    candidates = pd.read_parquet(run / "candidates.parquet")
    points = view.tradeoff_points()
    assert sorted(p.key for p in points) == sorted(candidates["key"])
    sla = view.config.goal.sla
    by_key = candidates.set_index("key")
    for point in points:  # a point is marked a miss exactly when a mean latency is over its bound
        row = by_key.loc[point.key]
        assert point.misses_sla == bool(row["mean_ttft_ms"] > sla.ttft_ms or row["mean_itl_ms"] > sla.itl_ms)
        assert point.score == pytest.approx(row["score"]) and point.used_gpus == row["used_gpus"]
    ranked = pd.read_csv(run / "ranked.csv")
    for branch, series in view.convergence().items():
        bests = [p.best for p in series if p.best is not None]
        assert bests == sorted(bests) and bests[-1] == pytest.approx(ranked[ranked.branch == branch]["score"].max())


def test_deployment_files_apply_side_by_side_at_the_replayed_dynamo_with_every_replayed_setting(default_run):
    run, _ = default_run
    names = set()
    for rank in (1, 2, 3):
        folder = run / "deploy" / str(rank)
        summary = read_model(folder / "deploy.json", DeploymentFiles)
        record = read_trial(folder / "trial.json")
        assert summary.error is None and summary.key == record.key and summary.differences == []
        documents = [*yaml.safe_load_all((folder / "k8s_deploy.yaml").read_text()),
                     *yaml.safe_load_all((folder / "k8s_bench.yaml").read_text())]  # fmt: skip
        assert [problem for document in documents for problem in document_problems(document)] == []
        dgd = documents[0]
        assert dgd["apiVersion"] == "nvidia.com/v1beta1" and dgd["metadata"]["namespace"] == "default"
        names.add(dgd["metadata"]["name"])
        components = components_by_role(dgd)
        backend = record.spec.sample["backend"]
        config = record.spec.parallel_config
        expected = {"agg": config} if record.spec.deployment_mode == "agg" else {"prefill": config.prefill,
                                                                                 "decode": config.decode}  # fmt: skip
        for role, replica in expected.items():
            container = main_container(components[role])
            assert container["image"].endswith(f"-runtime:{manifest_dynamo(run)}") and backend[:4] in container["image"]
            assert components[role]["replicas"] == replica.replicas
            assert int(container["resources"]["limits"]["nvidia.com/gpu"]) == replica.shape.gpus
        # A DGD changed after generation is caught: every difference is found by reading it back.
        first = components[next(iter(expected))]
        first["replicas"] += 1
        found = differences(replayed(record), dgd, {role: "h200_sxm" for role in expected})
        assert any("workers replayed" in d for d in found)
    assert len(names) == 3  # the top three stand side by side in one namespace


def manifest_dynamo(run):
    return read_model(run / "manifest.json", RunManifest).versions["ai-dynamo"]


# Run in a fresh interpreter: the host's steps ahead of the last two jobs, then the report and deploy jobs
# themselves, as their forks run them.
REPORT_AFTER_STEPS_AHEAD = """
import json, sys
from spica_lib.host.registry import JOBS
from spica_lib.run.job_args import JobArgs

report, deploy = (JobArgs.model_validate_json(text) for text in sys.argv[1:])
for step in JOBS["merge"].steps_ahead(report):  # what the host loads while the merge (or finish, ...) runs
    step()
before = set(sys.modules)
JOBS["report"].run(report)
JOBS["deploy"].run(deploy)
print(json.dumps(sorted(set(sys.modules) - before)))
"""


def test_the_host_loads_the_reports_libraries_while_the_jobs_before_it_run(default_run, tmp_path):
    # The report and the deployment files are the last jobs of every sweep: what they import (plots, statistics,
    # Dynamo's profiler for the release, aiconfigurator's generator) is loaded in the warm host ahead of them,
    # off the critical path.
    run, _ = default_run
    out = tmp_path / "report"
    inputs = {"config": str(run / "config.json"), "summary": str(run / "summary.json"), "table": str(run / "ranked.csv")}
    common = {"input": inputs, "params": {"run": run.name, "run_dir": str(run)}, "wildcards": {}, "threads": 1,
              "resources": {}}  # fmt: skip
    report = {**common, "rule": "report", "log": [str(tmp_path / "report.log")],
              "output": {"report": str(out / "report.md"), "plots": [], "manifest": str(tmp_path / "manifest.json")}}
    deploy = {**common, "rule": "deploy", "log": [str(tmp_path / "deploy.log")],
              "output": {"deploy": str(tmp_path / "deploy")}}  # fmt: skip
    done = subprocess.run([sys.executable, "-c", REPORT_AFTER_STEPS_AHEAD, json.dumps(report), json.dumps(deploy)],
                          cwd=REPO, capture_output=True, text=True, check=False, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    imported = json.loads(done.stdout.strip().splitlines()[-1])
    heavy = ("matplotlib", "scipy", "dynamo", "aiconfigurator", "transformers", "jinja2")
    late = [name for name in imported if name.split(".")[0] in heavy]
    assert not late, f"the report and deploy jobs themselves imported {late}"
    # The job still wrote everything (the same files as the sweep's own report job).
    assert (out / "report.md").is_file() and (tmp_path / "manifest.json").is_file()
    ranks = sorted(p.name for p in (run / "deploy").iterdir() if not p.name.startswith("."))  # not Snakemake's stamp
    assert ranks and sorted(p.name for p in (tmp_path / "deploy").iterdir()) == ranks


def test_status_show_and_report_read_a_finished_run(default_run, capsys, monkeypatch):
    run, _ = default_run
    status = run_status(run)
    assert status.state == "finished" and status.snakemake is None
    statuses = {s.branch: s for s in status.branches}
    summary = json.loads((run / "summary.json").read_text())
    for branch, status in statuses.items():
        assert status.rounds_told == 3 and status.trials_running == 0
        counts = summary["branches"][branch]["counts"]  # every status but a cache hit is a trial of its own
        assert status.trials_finished == sum(n for outcome, n in counts.items() if outcome != "cache_hit")
        assert status.trials_stopped_early == counts.get("pruned", 0)  # the default sweep's only early stops
    # A finished run's status leads with its answer: the fresh score first, the search's beside it, each named.
    text = status_text(run, run_status(run))
    lead = text.splitlines()[1]
    fresh, search = json.loads((run / "summary.json").read_text())["best_value"], summary["search_best_score"]
    assert lead.startswith("  recommended: #1 ") and f"{fresh:.4g} tok/s/GPU fresh" in lead
    assert f"{search:.4g} tok/s/GPU on the search's sample" in lead and lead.index("fresh") < lead.index("search's")
    assert text.rstrip().endswith(answer_block(run))
    monkeypatch.chdir(run.parent.parent)
    assert main(["show", run.name]) == 0
    shown = capsys.readouterr().out  # the fresh-sample metrics beside the search sample's
    assert "trial " in shown and re.search(r"^  metric +fresh mean +search sample$", shown, re.M)
    assert re.search(r"^  mean_ttft_ms +\d[\d.]* +\d[\d.]*$", shown, re.M) and "fresh (mean of" in shown
    assert main(["show", run.name, "999"]) == 2
    (run / "report" / "report.md").unlink()
    assert main(["report", str(run)]) == 0 and (run / "report" / "report.md").is_file()
    capsys.readouterr()
    # The namespace is chosen when the files are written: the run id stays the same.
    assert main(["show", run.name, "2", "--manifests", "--namespace", "team-b"]) == 0
    printed = list(yaml.safe_load_all(capsys.readouterr().out))
    assert [d["kind"] for d in printed] == ["DynamoGraphDeployment", "Job"]
    assert {d["metadata"]["namespace"] for d in printed} == {"team-b"} and printed[0]["metadata"]["name"].endswith("-2")
    assert main(["report", str(run), "--namespace", "team-a"]) == 0
    assert yaml.safe_load((run / "deploy" / "1" / "k8s_deploy.yaml").read_text())["metadata"]["namespace"] == "team-a"
    with pytest.raises(SystemExit):
        main(["report", str(run), "--namespace", "Team_A"])


def test_the_time_left_is_the_trials_left_at_the_pace_of_the_trials_this_invocation_finished():
    def branch(finished, here, expected):
        return BranchStatus(branch="agg", rounds_told=1, rounds_total=4, stalled=False, trials_finished=finished,
                            trials_running=2, trials_interrupted=0, trials_failed=0, trials_expected=expected,
                            trials_finished_this_run=here, replay_seconds=50.0, best_score=None, best_key=None)  # fmt: skip

    from spica_lib.run.status import _remaining

    # 10 finished before a resume, 10 by this invocation in 100 s: 20 left take about 200 s.
    status = RunStatus(state="running", snakemake="pid 1 on h", branches=[branch(20, 10, 40)], running_seconds=100.0)
    status.remaining_seconds = _remaining(status)
    assert status.remaining_seconds == pytest.approx(200.0)
    assert progress_text(status) == ("20 of about 40 trials done, 2 running; 50 s of replays; about 3 min left for "
                                     "the search's trials at this run's pace")  # fmt: skip
    status = RunStatus(state="running", snakemake="pid 1 on h", branches=[branch(20, 0, 40)], running_seconds=5.0)
    assert _remaining(status) is None  # no trial of this invocation has ended: no pace yet


def test_status_of_a_run_stopped_after_one_round(tmp_path):
    data = default_config(rounds=3, per_round=2)
    data["search_space"] = narrowed(data["search_space"], deployment_mode=["agg"])
    run, _ = sweep(tmp_path, data, "--run", "half", "--", "results/half/rounds/agg/0/observations.json")
    (status,) = run_status(run).branches
    round_zero = json.loads((run / "rounds" / "agg" / "0" / "suggestions.json").read_text())
    assert status.rounds_told == 1 and status.rounds_total == 3
    assert status.trials_finished == len(round_zero["new_keys"]) and status.trials_running == 0
    # Two rounds not suggested yet, two trials each: the search will run about four more.
    assert status.trials_expected == len(round_zero["new_keys"]) + 2 * 2
    text = progress_text(run_status(run))
    assert f"{status.trials_finished} of about {status.trials_finished + 4} trials done" in text and "left" not in text
    assert not (run / "rounds" / "agg" / "1" / "suggestions.json").exists()


def test_a_pareto_report_plots_the_front_over_all_feasible_points(tmp_path):
    data = yaml.safe_load((REPO / "config" / "examples" / "pareto_kv_load.yaml").read_text())
    data["sweep"].update(max_rounds=1, candidates_per_round=4)
    run, _ = sweep(tmp_path, data)
    assert (run / "report" / "pareto.png").is_file()
    view = RunView(run)
    front = pareto_front([r.candidate for r in view.rows], view.config.goal.resolved_pareto_objectives)
    assert sorted(r.key for r in view.ranked) == sorted(r.key for r in view.rows if r.candidate in front)
    assert sorted(pd.read_csv(run / "pareto.csv")["key"]) == sorted(r.key for r in view.ranked)


def test_snakemake_report_holds_the_report_and_every_plot(default_run):
    run, _ = default_run
    folder = run.parent.parent
    command = [sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "workflow" / "Snakefile")]
    command += ["--config", f"spica={folder / 'spica.yaml'}", "--report", "report.html"]
    done = subprocess.run(command, cwd=folder, capture_output=True, text=True, check=False, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    html = (folder / "report.html").read_text(encoding="utf-8")
    assert all(name in html for name in ("report.md", "tradeoff.png", "convergence.png", "latency.png"))


def small(example):
    data = yaml.safe_load((REPO / "config" / "examples" / example).read_text())
    # No stress test or baselines (the shared default run has both): the reports are what is tested here.
    data["sweep"].update(max_rounds=1, candidates_per_round=3, stress_top=0, baselines=False)
    if not data["goal"].get("target") == "pareto":  # a small finish
        data["sweep"].update(finish_top=2, finish_samples=2)
    data["search_space"] = narrowed(data["search_space"], deployment_mode=["agg"])
    return data


def test_the_p99_example_ranks_only_deployments_whose_p99_meets_the_sla(tmp_path):
    data = small("p99_sla.yaml")
    data["search_space"]["parallel_configs"] = [{"tp": 4, "replicas": 1}, {"tp": 1, "replicas": 1}]  # meets, misses
    data["sweep"]["candidates_per_round"] = 4
    run, _ = sweep(tmp_path, data)
    sla = data["goal"]["sla"]
    ranked = pd.read_csv(run / "ranked.csv")
    assert (ranked["p99_ttft_ms"] <= sla["ttft_ms"]).all()
    records = [json.loads(p.read_text())["result"] for p in run.glob("rounds/*/*/trials/*/*.json")]
    missed = [r for r in records if r["status"] == "infeasible"]
    # Over the p99 bound after the full replay, or stopped once certain to be: either way told how far.
    assert all(r["reason"].startswith(("misses the p99 SLA", "stopped early, certain to miss the p99 SLA: "))
               and r["sla_miss"] > 1 for r in missed)  # fmt: skip
    assert len(ranked) >= 1 and len(missed) >= 1 and len(ranked) + len(missed) == len(records)
    assert "p99_ttft_ms ≤ 1500 ms" in (run / "report" / "report.md").read_text()


def test_the_cost_example_ranks_the_cheapest_per_token_first(tmp_path):
    run, _ = sweep(tmp_path, small("cost.yaml"))
    ranked = pd.read_csv(run / "ranked.csv")
    cost = ranked["cost_per_million_output_tokens"]
    assert cost.notna().all() and cost.is_monotonic_increasing and (ranked["score"] == -cost).all()
    assert read_model(run / "manifest.json", RunManifest).gpu_hour_usd == 3.5


def test_the_two_workload_example_replays_each_candidate_on_both_and_ranks_by_the_worse(tmp_path):
    data = small("two_workloads.yaml")
    # The example names the trace relative to its own folder; its first 600 requests are enough to make the
    # night a workload of its own (the whole trace at a quarter of its rate made this the suite's slowest test).
    night = tmp_path / "night.jsonl"
    night.write_text("".join(TRACE.read_text(encoding="utf-8").splitlines(keepends=True)[:600]), encoding="utf-8")
    data["workload"][1]["trace_path"] = str(night)
    data["workload"][0]["num_request_ratio"] = 10
    run, _ = sweep(tmp_path, data)
    records = [json.loads(p.read_text())["result"] for p in run.glob("rounds/*/*/trials/*/*.json")]
    assert records and all(set(r["workloads"]) == {"day", "night"} for r in records)
    for result in (r for r in records if r["status"] == "feasible"):
        scores = {name: part["score"] for name, part in result["workloads"].items()}
        assert result["score"] == min(scores.values()) and scores[result["binding_workload"]] == result["score"]
    ranked = pd.read_csv(run / "ranked.csv")
    assert len(ranked) >= 1
    assert (ranked["score"] == ranked[["score_day", "score_night"]].min(axis=1)).all()
    assert ranked["binding_workload"].isin(["day", "night"]).all()
    report = (run / "report" / "report.md").read_text()
    assert "binds:" in report and "On each workload" in report


def test_the_baselines_are_replayed_on_the_search_s_workload_and_sla_and_the_summary_states_the_ratios(default_run):
    run, done = default_run
    baselines = read_model(run / "baselines.json", BaselinesResult)
    summary = json.loads((run / "summary.json").read_text())
    assert [b.name for b in baselines.baselines] == ["aiconfigurator", "no_planner", "default_router"]
    winner = read_trial(next(run.glob(f"rounds/*/*/trials/*/{baselines.winner_key}.json")))
    assert winner.key == pd.read_csv(run / "ranked.csv")["key"][0]
    pick = next(b for b in baselines.baselines if b.name == "aiconfigurator")
    assert pick.source == "replayed" and pick.result.status == "feasible"  # aiconfigurator picks for this default
    for item in baselines.baselines:
        assert item.spec is not None and item.result is not None
        # The very workload, SLA, screen and goal the search's trials were replayed with.
        assert item.spec.replay.workload == winner.spec.replay.workload
        assert item.spec.replay.sla == winner.spec.replay.sla and item.spec.replay.screen == winner.spec.replay.screen
        assert item.spec.goal == winner.spec.goal and item.spec.trace_sha256 == winner.spec.trace_sha256
    ratios = {b["name"]: b for b in summary["baselines"]}
    # Both on the search's traffic sample (the baselines are replayed on it): a paired comparison.
    assert ratios["aiconfigurator"]["ratio"] == pytest.approx(winner.result.score / pick.result.score)
    assert summary["finish"][0]["key"] == winner.key and summary["best_score"] == summary["finish"][0]["statistic"]
    assert "baselines: the winner scores " in summary["line"] and "x aiconfigurator's pick" in done.stdout
    assert "## Baselines" in (run / "report" / "report.md").read_text()


def test_the_default_sweep_ranks_its_finished_top_first_and_a_rerun_does_nothing(default_run):
    # Last in this module: the rerun runs in the shared run's folder (it must change nothing there).
    run, done = default_run
    assert "spica done:" in done.stdout + done.stderr
    ranked = pd.read_csv(run / "ranked.csv")
    assert len(ranked) >= 1 and list(ranked["rank"]) == list(range(1, len(ranked) + 1))
    # The finished top first, in its fresh samples' order; then the rest in the search's (score, best first).
    finished = ranked["verdict"].notna() if "verdict" in ranked else pd.Series(False, index=ranked.index)
    assert not (finished & ~finished.cummin()).any()  # no finished row after an unfinished one
    assert ranked.loc[~finished, "score"].is_monotonic_decreasing and (ranked["used_gpus"] <= 8).all()
    # A row says what was replayed: a KV router with one target per role ran as round robin.
    fell_back = ranked["notes"].fillna("").str.contains("replayed as round_robin")
    assert (ranked.loc[fell_back, "config_router_mode"] == "round_robin").all() and (ranked["selections"] >= 1).all()
    summary = json.loads((run / "summary.json").read_text())
    trials = len(list(run.glob("rounds/*/*/trials/*/*.json")))
    assert summary["unique_trials"] == trials <= 3 * 2 * 4  # rounds x branches x candidates per round
    assert set(summary["branches"]) == {"agg", "disagg"}
    # Every new feasible trial is one candidate; a cache hit is counted under its own status.
    assert len(pd.read_parquet(run / "candidates.parquet")) == summary["tallies"]["feasible"]
    before = {p: p.stat().st_mtime_ns for p in run.rglob("*") if p.is_file()}
    again = subprocess.run([*SPICA_RUN, str(run.parents[1] / "spica.yaml")], cwd=run.parents[1], capture_output=True,
                           text=True, check=False, timeout=900)  # fmt: skip
    assert again.returncode == 0 and "Nothing to be done" in snakemake_log(run)
    # The same answer block ends both: the run's answer is shown again when Snakemake had nothing to do.
    answer = done.stdout[done.stdout.index("spica done:") :]
    assert again.stdout.endswith(answer) and answer.strip()
    # Nothing but the log of this invocation changed.
    after = {p: p.stat().st_mtime_ns for p in run.rglob("*") if p.is_file()}
    log = run / "logs" / "snakemake.log"
    assert {p: t for p, t in after.items() if p != log} == {p: t for p, t in before.items() if p != log}
