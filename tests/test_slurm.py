"""The SLURM profile against a real one-node cluster (.ci/slurm-up.sh): replay jobs run in pilot jobs
(warm hosts on the node that outlive a round), several trials each; the result matches a local run;
the pilots end with the sweep, and die with it when Snakemake is SIGKILLed, leaving no process and
no spool; a hard kill plus scancel resumes without recomputing; a pilot SLURM kills mid-replay has
its job retried, and the trials it had started are recorded as failed while the sweep goes on.

They submit and cancel jobs, so they run only when asked (SPICA_REQUIRE_SLURM=1, which `.ci/run`
sets after starting the cluster) and only on the cluster `.ci/slurm-up.sh` made (ClusterName
spica-ci); asked for elsewhere, they fail instead of touching another cluster's jobs.
"""

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import psutil
import pytest
import yaml
from conftest import CI_CLUSTER, REPO, refusal, search_only, snakemake_log, write_yaml

from spica_lib.config.narrow import narrowed

pytestmark = [pytest.mark.slow, pytest.mark.slurm]
SPICA = [sys.executable, "-m", "spica_lib.cli", "run"]
PROFILE = str(REPO / "profiles" / "slurm")
# The shipped profile, made quicker for a one-node cluster that answers at once.
FAST = [
    "--slurm-init-seconds-before-status-checks", "2", "--seconds-between-status-checks", "1",
    "--max-status-checks-per-second", "2", "--latency-wait", "10",
]  # fmt: skip




def test_the_tests_touch_only_the_cluster_the_ci_script_made_and_only_when_asked():
    assert "SPICA_REQUIRE_SLURM=1" in refusal(False, "idle", CI_CLUSTER)
    assert "not touching" in refusal(True, "idle", "production")
    assert "no SLURM cluster" in refusal(True, "no sinfo on PATH", "")
    assert refusal(True, "idle", CI_CLUSTER) is None


def sweep_config() -> dict:
    """The default sweep, shrunk: 2 rounds of 2 candidates per branch, round robin (the KV router is noisy)."""
    data = yaml.safe_load((REPO / "config" / "default.yaml").read_text())
    data["search_space"] = narrowed(data["search_space"], router_mode=["round_robin"])
    # The finish runs on SLURM too; two samples of the top two are enough to show it.
    data["sweep"].update(max_rounds=2, candidates_per_round=2, parallel_evals=4, seed=5, finish_top=2, finish_samples=2)
    return data


def spica(folder: Path, config: Path, *extra: str, timeout: float = 900) -> subprocess.CompletedProcess:
    done = subprocess.run(
        [*SPICA, str(config), *extra], cwd=folder, capture_output=True, text=True, check=False, timeout=timeout
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    return done


def on_slurm(folder: Path, config: Path, *extra: str) -> subprocess.CompletedProcess:
    return spica(folder, config, "--profile", PROFILE, "--", *FAST, *extra)


def run_dir(folder: Path) -> Path:
    return next((folder / "results").iterdir())


def trial_files(folder: Path) -> list[Path]:
    return sorted(folder.glob("results/*/rounds/*/*/trials/*/*.json"), key=lambda p: (p.parent.parent.parent, p.name))


def journaled(folder: Path) -> list[Path]:
    return sorted(folder.glob("results/*/journal/*.json"))


def slurm_jobs_of_trials(folder: Path) -> dict[str, str]:
    """Trial key -> the SLURM job its replay job's last attempt ran in, from the replay job logs."""
    jobs = {}
    for trial in trial_files(folder):
        run, branch, round_index, job = (
            trial.parents[5],
            trial.parents[3].name,
            trial.parents[2].name,
            trial.parent.name,
        )
        log = run / "logs" / "rounds" / branch / round_index / "replay" / f"{job}.log"
        found = re.findall(r"SLURM job (\d+)", log.read_text()) if log.exists() else []
        if found:
            jobs[trial.stem] = found[-1]
    return jobs


def ranking(folder: Path) -> pd.DataFrame:
    table = pd.read_csv(run_dir(folder) / "ranked.csv")
    return table[["rank", "branch", "round", "key", "score", "used_gpus"]]


def job_state(job: str) -> str:
    return subprocess.run(["scontrol", "show", "job", job], capture_output=True, text=True, timeout=10).stdout


def running_jobs(name: str | None = None) -> list[str]:
    named = ["-n", name] if name else []
    done = subprocess.run(
        ["squeue", "-h", "-t", "RUNNING", "-o", "%i", *named], capture_output=True, text=True, timeout=10
    )
    return done.stdout.split()


PILOT_NAME = "spica-pilot"


def pilot_jobs() -> list[str]:
    done = subprocess.run(["squeue", "-h", "-o", "%i", "-n", PILOT_NAME], capture_output=True, text=True, timeout=10)
    return done.stdout.split()


def pilot_processes() -> list[psutil.Process]:
    found = []
    for process in psutil.process_iter(["cmdline"]):
        with contextlib.suppress(psutil.Error):
            if any("spica_lib.pilot" in part for part in process.info["cmdline"] or []):
                found.append(process)
    return found


JOB_RECORD_SECONDS = 15  # slurmctld's lag between a batch script's end and the job leaving squeue


def assert_pilots_gone(folder: Path, within: float = 60) -> None:
    """No pilot job in SLURM, no pilot or keeper process, no spool folder: the sweep left nothing behind.

    `within=0`: the sweep has returned, so no pilot process may be left at all; SLURM itself may list a
    pilot that has just ended for a few seconds more (completing), which JOB_RECORD_SECONDS allows."""
    if within == 0:
        assert pilot_processes() == [] and not list(folder.glob("results/*/.pilot"))
        within = JOB_RECORD_SECONDS
    deadline = time.time() + within
    while time.time() < deadline and (pilot_jobs() or pilot_processes()):
        time.sleep(0.5)
    assert pilot_jobs() == [] and pilot_processes() == []
    assert not list(folder.glob("results/*/.pilot"))


def cancel_all() -> None:
    subprocess.run(["scancel", "--user", os.environ.get("USER", "root")], capture_output=True, timeout=10)
    deadline = time.time() + 60
    while (
        time.time() < deadline
        and subprocess.run(["squeue", "-h", "-o", "%i"], capture_output=True, text=True, timeout=10).stdout.strip()
    ):
        time.sleep(0.5)


@pytest.fixture(autouse=True)
def _queue_left_empty(request):
    """Each cluster test starts on an empty queue: a job an earlier test left (a failure of its own, or a pilot
    SLURM still lists for a few seconds after it ended) must not be counted as this test's."""
    if "cluster" in request.fixturenames:
        request.getfixturevalue("cluster")
        cancel_all()


@pytest.fixture(scope="module")
def local_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("local")
    config = write_yaml(folder, sweep_config())
    spica(folder, config, "--cores", "2")
    return folder, config


def test_the_profile_dry_runs_without_a_cluster(tmp_path):
    bare = tmp_path / "bin"  # no sbatch, squeue or sinfo; Snakemake itself needs `which`
    bare.mkdir()
    (bare / "which").symlink_to(shutil.which("which"))
    config = write_yaml(tmp_path, sweep_config())
    done = subprocess.run(
        [sys.executable, "-m", "snakemake", "-s", str(REPO / "workflow" / "Snakefile"), "--profile", PROFILE, "-n",
         "--config", f"spica={config}"],
        cwd=tmp_path, capture_output=True, text=True, env={**os.environ, "PATH": str(bare)}, check=False, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert "suggest" in done.stdout and "This was a dry-run" in done.stdout
    assert not (tmp_path / "results").exists()


def test_a_sweep_on_slurm_runs_its_trials_there_several_per_job_and_matches_the_local_run(cluster, local_run, tmp_path):
    local, config = local_run
    done = on_slurm(tmp_path, config)

    jobs = slurm_jobs_of_trials(tmp_path)
    trials = trial_files(tmp_path)
    assert len(trials) >= 4 and {t.stem for t in trials} == set(jobs)  # every trial ran inside a SLURM job
    assert len(set(jobs.values())) < len(jobs)  # several trials per job, not one sbatch job per trial
    output = snakemake_log(run_dir(tmp_path))  # Snakemake's and its jobs' words; the screen shows the progress view
    # The progress view under SLURM, not a terminal: a line per told round from the run folder (a job's output never
    # reaches Snakemake's process here), no Snakemake job header, and the answer last.
    rounds = [line for line in done.stdout.splitlines() if re.search(r"\] (agg|disagg) +round \d/2 ", line)]
    assert len(rounds) == 4 and all("best so far" in line for line in rounds), done.stdout
    assert not re.search(r"^(\[\w{3} |Job \d+|rule |localrule |Finished jobid|Select jobs)", done.stdout, re.M)
    assert done.stdout.rstrip().splitlines()[-1].startswith("deployment files of #1: results/")
    assert len(done.stdout.splitlines()) <= 40
    pilots = set(re.findall(r"submitted pilot job (\d+)", output))
    assert set(jobs.values()) <= pilots  # the replays ran in pilots, not in a SLURM job each
    for job in set(jobs.values()):
        state = job_state(job)
        assert "JobState=COMPLETED" in state and f"JobName={PILOT_NAME}" in state  # ended on the sweep's stop
    assert "SLURM jobid" in output  # aiconfigurator's pick: a SLURM job of its own
    assert_pilots_gone(tmp_path, within=0)

    assert [t.name for t in trials] == [t.name for t in trial_files(local)]
    pd.testing.assert_frame_equal(ranking(tmp_path), ranking(local))


def test_a_hard_kill_and_scancel_resume_without_recomputing_finished_trials(cluster, local_run, tmp_path):
    local, config = local_run
    process = subprocess.Popen(
        [*SPICA, str(config), "--profile", PROFILE, "--", *FAST],
        cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    deadline = time.time() + 600
    while time.time() < deadline and not (journaled(tmp_path) and running_jobs()):
        assert process.poll() is None, "the sweep ended before it could be killed"
        time.sleep(0.2)
    os.killpg(process.pid, signal.SIGKILL)  # the login session dies; its SLURM jobs would run on
    process.wait(timeout=60)
    assert_pilots_gone(tmp_path)  # but its keeper scancels the pilots and removes their spool
    cancel_all()  # the cancelled group job's Snakemake may delete outputs it had just written
    finished = {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in journaled(tmp_path)}
    assert 0 < len(finished) < len(trial_files(local))  # killed mid-sweep

    on_slurm(tmp_path, config)
    assert all((p.stat().st_mtime_ns, p.read_bytes()) == before for p, before in finished.items())
    outputs = {p.stem: p.read_bytes() for p in trial_files(tmp_path)}
    assert all(outputs[p.stem] == data for p, (_, data) in finished.items())  # restored, not replayed again
    assert [t.name for t in trial_files(tmp_path)] == [t.name for t in trial_files(local)]
    pd.testing.assert_frame_equal(ranking(tmp_path), ranking(local))


def test_a_trials_per_job_that_cannot_work_is_refused_before_anything_runs(tmp_path):
    config = write_yaml(tmp_path, sweep_config())
    done = subprocess.run(
        [sys.executable, "-m", "snakemake", "-s", str(REPO / "workflow" / "Snakefile"), "-n", "--cores", "1",
         "--set-resources", "replay:trials_per_job=0", "--config", f"spica={config}"],
        cwd=tmp_path, capture_output=True, text=True, check=False, timeout=300,
    )  # fmt: skip
    assert done.returncode != 0 and "trials_per_job must be a whole number >= 1, got 0" in done.stdout + done.stderr
    assert not (tmp_path / "results").exists()


def test_a_sigkill_of_spica_run_while_its_pilots_wait_in_the_queue_ends_the_sweep_and_its_slurm_jobs(
    cluster, tmp_path
):
    # Every CPU of the node held, so the sweep's pilots (and aiconfigurator's pick) pend in the queue.
    cpus = subprocess.run(["sinfo", "-h", "-N", "-o", "%c"], capture_output=True, text=True, check=True).stdout.split()[0]
    holder = subprocess.run(["sbatch", "--parsable", "-p", "cpu", f"--cpus-per-task={cpus}", "-o", "/dev/null",
                             "--wrap", "sleep 600"], capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    process = None
    try:
        config = write_yaml(tmp_path, sweep_config())
        process = subprocess.Popen([*SPICA, str(config), "--profile", PROFILE, "--", *FAST], cwd=tmp_path,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
        deadline = time.time() + 300
        while time.time() < deadline and not pilot_jobs():
            assert process.poll() is None, "the sweep ended before its pilots were queued"
            time.sleep(0.2)
        assert pilot_jobs() and running_jobs() == [holder]  # pilots pending: their waiting jobs hold Snakemake
        everything = psutil.Process(process.pid).children(recursive=True)
        process.kill()  # `spica run` alone: Snakemake is only asked to finish its running jobs, which wait for ever
        process.wait(timeout=60)
        deadline = time.time() + 60
        while time.time() < deadline and ([p for p in everything if p.is_running()] or pilot_jobs()):
            time.sleep(0.5)
        assert [p for p in everything if p.is_running()] == []  # Snakemake, its keeper, host and waiting jobs
        queued = subprocess.run(["squeue", "-h", "-o", "%i"], capture_output=True, text=True, check=True).stdout
        assert queued.split() == [holder]  # its pilots and its own SLURM job (aiconfigurator's pick) cancelled
        assert not list(tmp_path.glob("results/*/.pilot"))
    finally:
        if process is not None and process.poll() is None:  # a failed check above: its sweep must not run on
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=60)
        subprocess.run(["scancel", holder], check=False)


def test_a_finish_no_node_of_its_partition_can_hold_is_refused_before_the_search(cluster, tmp_path):
    from spica_lib.run.job_memory import FLOOR_MB_PER_REPLAY, slurm_node_mb

    node_mb = slurm_node_mb("cpu")
    assert node_mb is not None  # the CI node's RealMemory, read from sinfo
    replays = node_mb // FLOOR_MB_PER_REPLAY + 1  # one replay of the default workload more than the node holds
    config = write_yaml(tmp_path, sweep_config())
    done = subprocess.run([*SPICA, str(config), "--profile", PROFILE, "--", "--set-threads", f"finish={replays}"],
                          cwd=tmp_path, capture_output=True, text=True, check=False, timeout=300)  # fmt: skip
    said = done.stdout + done.stderr
    assert done.returncode == 2, said[-3000:]
    assert f"the finish job asks SLURM for {replays * FLOOR_MB_PER_REPLAY} MB" in said
    assert f"partition cpu has {node_mb} MB" in said and f"set-threads finish: {replays - 1}" in said
    assert not (tmp_path / "results").exists() and not list(tmp_path.glob("logs/slurm/**/*.log"))


def started(folder: Path) -> list[Path]:
    return sorted(folder.glob("results/*/journal/*.started"))


def test_a_replay_job_slurm_kills_is_retried_then_its_started_trials_are_failed_and_the_sweep_goes_on(
    cluster, tmp_path
):
    data = sweep_config()
    data["search_space"] = narrowed(data["search_space"], deployment_mode=["agg"])
    data["sweep"]["max_rounds"] = 1
    data["workload"]["num_request_ratio"] = 3000  # 24,000 requests: ~2 s replays, long enough to cancel mid-way
    data["sweep"]["screen_fraction"] = None  # no prefix screen: it could end a trial before the cancel lands
    config = write_yaml(tmp_path, search_only(data))  # after the search: only more 24,000-request replays
    process = subprocess.Popen(
        [*SPICA, str(config), "--profile", PROFILE, "--", *FAST, "--retries", "1"],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
    )  # fmt: skip
    deadline = time.time() + 600
    cancelled = None
    while time.time() < deadline and cancelled is None and process.poll() is None:
        jobs = running_jobs(PILOT_NAME)
        if jobs and started(tmp_path):  # a replay is in flight: cancel its pilot before it can finish
            cancelled = jobs[0]
            subprocess.run(["scancel", cancelled], check=True, timeout=10)
        time.sleep(0.1)
    output, _ = process.communicate(timeout=600)
    records = [json.loads(p.read_text()) for p in trial_files(tmp_path)]
    any_feasible = any(r["result"]["status"] == "feasible" for r in records)
    # The sweep finishes either way; with every trial killed it has nothing to rank and exits 1 saying so.
    assert cancelled is not None and process.returncode == (0 if any_feasible else 1), output[-5000:]
    assert any_feasible or "found no feasible candidate" in output, output[-6000:]

    killed = [r for r in records if r["result"]["status"] == "failed"]
    assert killed and all("killed outside the replay in 1 attempt" in r["result"]["reason"] for r in killed)
    summary = json.loads((run_dir(tmp_path) / "summary.json").read_text())
    assert summary["tallies"]["failed"] == len(killed)
    assert set(slurm_jobs_of_trials(tmp_path).values()) - {cancelled}  # the retry ran in a new pilot
    assert_pilots_gone(tmp_path, within=0)


@pytest.mark.parametrize("pilots", [0, 2])
def test_partition_and_gpu_gres_set_for_replays_reach_their_slurm_jobs(cluster, tmp_path, pilots):
    data = sweep_config()
    data["search_space"] = narrowed(data["search_space"], deployment_mode=["agg"])
    data["sweep"]["max_rounds"] = 1
    config = write_yaml(tmp_path, search_only(data))
    cluster_settings = ["--set-resources", "replay:slurm_partition=gpu", "replay:gres=gpu:1", "replay:mem_mb=4000"]
    cluster_settings += [f"replay:pilots={pilots}"] if pilots else []  # the command line replaces the profile's
    on_slurm(tmp_path, config, *cluster_settings)
    jobs = set(slurm_jobs_of_trials(tmp_path).values())
    assert jobs
    for job in jobs:
        state = job_state(job)
        assert "Partition=gpu" in state and "TresPerNode=gres:gpu:1" in state, state
        assert (f"JobName={PILOT_NAME}" in state) == bool(pilots)
