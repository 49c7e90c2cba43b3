"""The whole sweep through Snakemake with the real Vizier and the real replay; resume after a kill."""

import json
import os
import re
import signal
import subprocess
import sys
import time

import pandas as pd
import psutil
import pytest
import yaml
from conftest import REPO, WALL_CLOCK_METRICS, search_only, snakemake_log, write_yaml

from spica_lib.config.narrow import narrowed
from spica_lib.run.status import run_status, status_text

pytestmark = pytest.mark.slow
SPICA = [sys.executable, "-m", "spica_lib.cli", "run"]


def default_config(**sweep):
    data = yaml.safe_load((REPO / "config" / "default.yaml").read_text())
    # A small finish: these tests are about the rounds (tests/test_finish.py is about the finish).
    data["sweep"].update({"max_rounds": 2, "candidates_per_round": 2, "finish_top": 2, "finish_samples": 2, **sweep})
    return data


def run(folder, config_path, *extra, env=None):
    return subprocess.run(
        [*SPICA, str(config_path), *extra],
        cwd=folder,
        capture_output=True,
        text=True,
        check=False,
        timeout=900,
        env={**os.environ, **(env or {})},
    )


def run_dir(folder):
    return next((folder / "results").iterdir())


def keys_by_round(run_path):
    out = {}
    for path in sorted(run_path.glob("rounds/*/*/suggestions.json")):
        data = json.loads(path.read_text())
        out[(data["deployment_mode"], data["round"])] = data["new_keys"]
    return out


def test_a_sweep_with_no_feasible_candidate_exits_1_and_says_why(tmp_path):
    # Every replay hits a time limit far below its cost: nothing is feasible, but every trial is recorded.
    data = default_config(max_eval_seconds=0.01)
    data["search_space"] = narrowed(data["search_space"], deployment_mode=["agg"], router_mode=["round_robin"])
    path = write_yaml(tmp_path, data)
    done = run(tmp_path, path)
    assert done.returncode == 1, done.stderr[-3000:]
    assert "found no feasible candidate" in done.stderr and "timed out" in done.stderr
    summary = json.loads((run_dir(tmp_path) / "summary.json").read_text())
    assert summary["best_score"] is None and summary["tallies"]["timed_out"] >= 1
    # Each pass's timeouts were replaced within the round (refill passes, told the failures) until the
    # round's cap of 11x its target; then the branch stopped, short of replays that say something.
    round_zero = run_dir(tmp_path) / "rounds" / "agg" / "0"
    passes = [json.loads((round_zero / "suggestions.json").read_text())]
    passes += [
        json.loads(p.read_text())
        for p in sorted(round_zero.glob("refill/*/suggestions.json"), key=lambda p: int(p.parent.name))
    ]
    assert len(passes) > 2 and sum(p["attempts"] for p in passes) == 11 * 2
    for earlier, refill in zip(passes, passes[1:]):
        assert refill["replaces"] == earlier["new_keys"] and refill["first_batch"] == earlier["first_batch"] + 1
    history = json.loads((round_zero / "observations.json").read_text())
    assert history["stalled"] and "0/2 new configuration(s) that replayed" in history["stall_reason"]
    assert history["tallies"][0]["refills"] == len(passes) - 1
    trials = list(round_zero.glob("trials/*/*.json"))
    assert len(trials) == sum(len(p["new_keys"]) for p in passes)
    (status,) = run_status(run_dir(tmp_path)).branches  # `spica status` counts the refills' trials too
    assert status.trials_finished == status.trials_failed == len(trials) and status.stalled


def round_robin_config(**sweep):
    """The default sweep, small, round robin only (Dynamo's KV router breaks ties randomly, which would make
    the scores noisy), without the stress test and baselines (what these tests compare is the trials and
    the ranking; the finish stays, as a resume must restore its samples too)."""
    data = default_config(seed=11, stress_top=0, baselines=False, **sweep)
    data["search_space"] = narrowed(data["search_space"], router_mode=["round_robin"])
    return data


@pytest.fixture(scope="module")
def round_robin_run(tmp_path_factory):
    """One uninterrupted sweep of round_robin_config(), shared by the tests that compare another run with it
    (they only read it)."""
    folder = tmp_path_factory.mktemp("round_robin")
    path = write_yaml(folder, round_robin_config())
    done = run(folder, path)
    assert done.returncode == 0, done.stderr[-3000:]
    return folder, path


@pytest.mark.parametrize("in_flight", [1, 2], ids=["barrier rounds", "2 rounds in flight"])
def test_a_killed_sweep_resumes_without_recomputing_and_matches_an_uninterrupted_one(tmp_path, in_flight, request):
    killed = tmp_path / "killed"
    killed.mkdir()
    if in_flight == 1:
        straight, path = request.getfixturevalue("round_robin_run")
    else:
        straight = tmp_path / "straight"
        straight.mkdir()
        path = write_yaml(tmp_path, round_robin_config(max_rounds=3, rounds_in_flight=in_flight))
        done = run(straight, path)
        assert done.returncode == 0, done.stderr[-3000:]
        # Round 1 was asked for before round 0 was told, and round 2 only after it.
        rounds = run_dir(straight) / "rounds" / "agg"
        suggested, told = ({r: (rounds / str(r) / name).stat().st_mtime for r in range(3)} for name in NAMES)
        # Round 2 waits for round 0's tell (the DAG says so). Round 1 does not, but whether it *starts* before
        # that tell is Snakemake's scheduling on a busy machine (240-request replays end within a scheduler
        # pass): what is guaranteed, and asserted, is that round 1 was asked for with round 0 in flight.
        assert told[0] < suggested[2]
        in_flight_of = [json.loads((rounds / str(r) / "suggestions.json").read_text())["in_flight"] for r in range(3)]
        assert in_flight_of == [[], [0], [1]]

    process = subprocess.Popen(
        [*SPICA, str(path)], cwd=killed, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    trials = killed / "results"
    deadline = time.time() + 300
    while time.time() < deadline and len(list(trials.glob("*/rounds/*/*/trials/*/*.json"))) < 2:
        time.sleep(0.5)
    live = run_status(run_dir(killed))
    assert live.state == "running" and live.running_seconds > 0
    os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=60)
    assert not list(trials.glob("*/summary.json")), "the sweep finished before it was killed"
    finished = {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in trials.glob("*/rounds/*/*/trials/*/*.json")}
    assert len(finished) >= 2
    # SIGKILL is sent, not done: on a busy machine the killed Snakemake can take a moment to be gone.
    deadline = time.time() + 60
    while (status := run_status(run_dir(killed))).state == "running" and time.time() < deadline:
        time.sleep(0.2)
    assert status.state == "stopped" and all(b.trials_running == 0 for b in status.branches)
    assert "stopped: its Snakemake is gone" in status_text(run_dir(killed), status)
    assert status.remaining_seconds is None and f"{status.trials_finished} of about" in status_text(run_dir(killed), status)
    # What a write killed half-way leaves: a temporary beside its artifact.
    torn = run_dir(killed) / "rounds" / ".observations.json.k1ll3d.tmp"
    torn.write_text("{")
    os.utime(torn, (time.time() - 5, time.time() - 5))

    resumed = run(killed, path)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert not torn.exists()  # the resumed run cleared its predecessor's temporary
    assert run_status(run_dir(killed)).state == "finished"
    assert all((p.stat().st_mtime_ns, p.read_bytes()) == before for p, before in finished.items())  # nothing recomputed
    assert keys_by_round(run_dir(killed)) == keys_by_round(run_dir(straight))  # same trials, same order
    ranked = [pd.read_csv(run_dir(folder) / "ranked.csv") for folder in (straight, killed)]
    assert list(ranked[0]["key"]) == list(ranked[1]["key"]) and list(ranked[0]["score"]) == list(ranked[1]["score"])


NAMES = ("suggestions.json", "observations.json")


def replay_job_in_flight(launcher):
    """(a replay job's process, the replays running for it), or None while no replay runs.

    With the sweep's warm host the job's replays run under the host (host -> the job's child ->
    replays); without it, under the job's own process. One replay job runs at a time in the sweeps
    that use this (one branch, one round).
    """
    processes = launcher.children(recursive=True)
    jobs = [p for p in processes if runs(p, "replay.py")]
    hosts = warm_hosts(processes)
    replays = [replay for host in hosts for child in children(host) for replay in children(child)]
    replays = alive(replays or [replay for job in jobs for replay in children(job)])
    return (jobs[0], replays) if jobs and replays else None


def warm_hosts(processes):
    """The warm host among these processes (its forked job children carry the same command line)."""
    hosts = [p for p in processes if runs(p, "spica_lib.host.server")]
    return [p for p in hosts if p.ppid() not in {h.pid for h in hosts}]


def runs(process, part):
    try:
        return any(word.endswith(part) for word in process.cmdline())
    except psutil.NoSuchProcess:
        return False


def children(process):
    try:
        return process.children()
    except psutil.NoSuchProcess:
        return []


def alive(processes):
    out = []
    for process in processes:
        try:
            if process.status() != psutil.STATUS_ZOMBIE:
                out.append(process)
        except psutil.NoSuchProcess:
            continue
    return out


def slow_replays_config():
    data = default_config()
    data["search_space"] = narrowed(data["search_space"], deployment_mode=["agg"])
    # 24,000 requests: a replay runs ~2 s, long enough to be caught mid-way (3,200 ran 0.3 s, and a
    # poll could catch a child that had already ended and been journaled)
    data["workload"]["num_request_ratio"] = 3000
    data["sweep"]["max_rounds"] = 1
    return search_only(data)  # after the search: only more 24,000-request replays


def test_a_replay_job_killed_from_outside_records_its_started_trials_as_failed_and_the_sweep_finishes(tmp_path):
    path = write_yaml(tmp_path, slow_replays_config())
    process = subprocess.Popen(
        [*SPICA, str(path)], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    killed, deadline = None, time.time() + 300
    while killed is None and time.time() < deadline and process.poll() is None:
        found = replay_job_in_flight(psutil.Process(process.pid))
        if found is not None and list(run_dir(tmp_path).glob("journal/*.started")):
            job, replays = found
            job.kill()  # the job's process, as the OOM killer or a scheduler would
            killed = replays
        time.sleep(0.05)
    output, _ = process.communicate(timeout=600)
    records = [json.loads(p.read_text()) for p in run_dir(tmp_path).glob("rounds/*/*/trials/*/*.json")]
    any_feasible = any(r["result"]["status"] == "feasible" for r in records)
    assert killed is not None and process.returncode == (0 if any_feasible else 1), output[-4000:]
    assert any_feasible or "found no feasible candidate" in output  # finished, and said why nothing ranks
    assert alive(killed) == []  # the job's replays died with it
    failed = [r for r in records if r["result"]["status"] == "failed"]
    assert len(failed) >= 1  # the trials it had started (forked, or about to be)
    assert all(r["result"]["reason"].startswith("killed outside the replay in 1 attempt") for r in failed)
    assert json.loads((run_dir(tmp_path) / "summary.json").read_text())["tallies"]["failed"] == len(failed)


def test_a_replay_job_killed_with_no_retry_left_shows_its_error_and_the_logs_path(tmp_path):
    """A failed sweep still says what failed: the progress view names the job and its log, and `spica run` ends
    with the last lines of Snakemake's log (its error) and the log's path."""
    path = write_yaml(tmp_path, slow_replays_config())
    process = subprocess.Popen(
        [*SPICA, str(path), "--", "--retries", "0"], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    killed, deadline = False, time.time() + 300
    while not killed and time.time() < deadline and process.poll() is None:
        found = replay_job_in_flight(psutil.Process(process.pid))
        if found is not None and list(run_dir(tmp_path).glob("journal/*.started")):
            found[0].kill()  # the job's process, as the OOM killer would; no retry is left
            killed = True
        time.sleep(0.05)
    stdout, stderr = process.communicate(timeout=600)
    assert killed and process.returncode == 1, stdout + stderr
    log = run_dir(tmp_path) / "logs" / "snakemake.log"
    assert re.search(r"\] job replay failed; its log: results/\w+/logs/rounds/agg/0/replay/\d+\.log$", stdout, re.M), stdout
    assert "spica run failed" in stderr and f"the whole log: {log.relative_to(tmp_path)}" in stderr, stderr
    assert "Error in rule replay" in stderr and "Error in rule replay" in log.read_text()  # Snakemake's own words
    assert "spica done:" not in stdout  # no answer: there is none


def test_stopping_spica_run_stops_every_job_and_replay_and_leaves_no_temporary_file(tmp_path):
    path = write_yaml(tmp_path, slow_replays_config())
    process = subprocess.Popen(
        [*SPICA, str(path)], cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    launcher, deadline, everything = psutil.Process(process.pid), time.time() + 300, []
    while time.time() < deadline and process.poll() is None and replay_job_in_flight(launcher) is None:
        time.sleep(0.05)
    everything = launcher.children(recursive=True)
    assert replay_job_in_flight(launcher) is not None
    process.send_signal(signal.SIGTERM)  # only `spica run` itself, as a user's kill would
    process.wait(timeout=120)
    deadline = time.time() + 30
    while time.time() < deadline and alive(everything):
        time.sleep(0.1)
    assert alive(everything) == []
    assert [p for p in (tmp_path / "results").rglob("*") if p.name.endswith(".tmp")] == []


def test_a_sigkill_of_snakemake_mid_replay_takes_the_warm_host_its_jobs_and_their_replays_with_it(tmp_path):
    path = write_yaml(tmp_path, slow_replays_config())
    process = subprocess.Popen(
        [*SPICA, str(path)], cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    launcher, deadline = psutil.Process(process.pid), time.time() + 300
    while time.time() < deadline and process.poll() is None and replay_job_in_flight(launcher) is None:
        time.sleep(0.05)
    assert replay_job_in_flight(launcher) is not None
    everything = launcher.children(recursive=True)
    (host,) = warm_hosts(everything)
    snakemake = host.parent()
    snakemake.kill()  # nothing can clean up after a SIGKILL: the kernel's parent-death signals must
    deadline = time.time() + 30
    while time.time() < deadline and alive(everything):
        time.sleep(0.1)
    assert alive(everything) == []
    process.wait(timeout=60)


def test_a_sigkill_of_spica_run_stops_snakemake_its_jobs_and_their_replays(tmp_path):
    data = slow_replays_config()
    data["sweep"]["max_rounds"] = 4  # left alone, the sweep would run on for a minute or more
    path = write_yaml(tmp_path, data)
    process = subprocess.Popen(
        [*SPICA, str(path)], cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    launcher, deadline = psutil.Process(process.pid), time.time() + 300
    while time.time() < deadline and process.poll() is None and replay_job_in_flight(launcher) is None:
        time.sleep(0.05)
    assert replay_job_in_flight(launcher) is not None
    everything = launcher.children(recursive=True)
    process.kill()  # `spica run` itself, as a test's timeout or the OOM killer would: it cannot forward anything
    process.wait(timeout=60)
    deadline = time.time() + 20
    while time.time() < deadline and alive(everything):
        time.sleep(0.1)
    assert alive(everything) == []


TIMINGS = {"wall_seconds", "cpu_seconds", "replay_seconds"}


def trials_without_timings(run_path):
    out = {}
    for path in run_path.glob("rounds/*/*/trials/*/*.json"):
        record = json.loads(path.read_text())
        result = {k: v for k, v in record["result"].items() if k not in TIMINGS}
        result["metrics"] = {k: v for k, v in result["metrics"].items() if k not in WALL_CLOCK_METRICS}
        for part in ("checkpoint", "stop"):  # where the prefix ended and where a stop came: their timings vary
            if result.get(part):
                result[part] = {k: v for k, v in result[part].items() if k not in TIMINGS}
        out[path.name] = {**record, "result": result}
    return out


def test_the_warm_host_and_one_job_per_trial_give_the_trials_and_ranking_of_jobs_in_their_own_processes(
    round_robin_run, tmp_path
):
    # The shared run's jobs ran in the sweep's warm host, several trials each. This run changes both the
    # placement (every job in its own cold process) and the batching (one trial per replay job): neither
    # may change a replay or the ranking.
    hosted, path = round_robin_run
    own = tmp_path / "own"
    own.mkdir()
    done = run(own, path, "--", "--set-resources", "replay:trials_per_job=1", env={"SPICA_WARM_HOST": "off"})
    assert done.returncode == 0, done.stderr[-3000:]
    assert len(list(run_dir(own).glob("rounds/*/0/trials/*"))) > len(list(run_dir(hosted).glob("rounds/*/0/trials/*")))
    assert trials_without_timings(run_dir(hosted)) == trials_without_timings(run_dir(own))
    assert (run_dir(hosted) / "ranked.csv").read_bytes() == (run_dir(own) / "ranked.csv").read_bytes()
    for folder, where in ((hosted, "in the sweep's warm host"), (own, "in its own process")):
        logs = [p.read_text() for p in run_dir(folder).glob("logs/rounds/*/*/replay/*.log")]
        assert logs and all(where in log for log in logs)  # each path really ran where it says


def test_every_replay_job_of_a_round_is_started_at_once_not_one_after_another(tmp_path):
    # Two trials, a job each, one CPU each on two cores: Snakemake must start both before either ends.
    # (Tell once asked for a round's jobs one at a time, so a round of n jobs took n replays' time.)
    data = default_config(seed=2, max_rounds=1, candidates_per_round=2, baselines=False, stress_top=0, warm_start=False)
    del data["sweep"]["finish_top"]
    data["sweep"]["finish_samples"] = 0
    data["search_space"] = narrowed(data["search_space"], deployment_mode=["agg"], router_mode=["round_robin"])
    path = write_yaml(tmp_path, data)
    done = run(
        tmp_path, path, "--cores", "2", "--", "--set-resources", "replay:trials_per_job=1", "--set-threads", "replay=1"
    )
    assert done.returncode == 0, done.stderr[-3000:]
    log = snakemake_log(run_dir(tmp_path)).splitlines()
    started = [i for i, line in enumerate(log) if re.search(r"Replaying job \d of round 0 of agg", line)]
    first_end = next(i for i, line in enumerate(log) if "(Rule: replay)" in line)
    assert len(started) == 2 and max(started) < first_end, "\n".join(log)
