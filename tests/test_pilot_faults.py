"""Pilots against the faults a shared cluster file system and a busy cluster produce, on this machine.

Each test constructs one fault: a stalled pilot (SIGSTOP), a claim file that vanishes, failing beat or
result writes (ESTALE injected by tests/fake_host.py), an NFS rename that succeeded but answers ENOENT,
a keeper whose writes fail, a pilot SLURM starts late or with less time than asked, a keeper killed
before its pilot started, a warm-up that is slow or hangs, spool files another user could have
written. The SLURM commands are the fakes of tests/fake_slurm.py (named so), the jobs the fakes of
tests/fake_host.py; the keeper, pilot and rule-script code are the real ones.
"""

import errno
import json
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from test_pilot import FAKE_HOST, NEEDS, RULE_SCRIPT, Sweep, fake_job, wait_for_job

from spica_lib.pilot import keeper as keeper_module
from spica_lib.pilot import node as node_module
from spica_lib.run.layout import RunFiles
from spica_lib.pilot.settings import PilotSettings
from spica_lib.pilot.spool import (
    PilotBeat,
    PilotRequest,
    PrivacyError,
    Spool,
    read_request,
    touch_private,
    write_private,
)
from spica_lib.pilot.time_left import parse_time_left, pilot_minutes
from spica_lib.pilot.waiter import run_on_pilot

FAKE_SLURM = Path(__file__).parent / "fake_slurm.py"


def gone(process: psutil.Process) -> bool:
    try:
        return process.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def forked_jobs(pilot: psutil.Process) -> list[psutil.Process]:
    """The pilot's forked job children (not an squeue it runs): they share its command line."""
    found = []
    for child in pilot.children():
        try:
            if child.cmdline() == pilot.cmdline():
                found.append(child)
        except psutil.Error:
            continue
    return found


def until(condition, seconds: float = 30, what: str = "the condition") -> None:
    deadline = time.time() + seconds
    while time.time() < deadline and not condition():
        time.sleep(0.05)
    assert condition(), f"{what} did not happen within {seconds:g} s"


class FakeCluster:
    """A spool, its real keeper, and the fake sbatch/squeue/scancel of tests/fake_slurm.py first on its PATH."""

    def __init__(self, folder: Path, settings: PilotSettings):
        self.folder, self.state, bin_dir = folder, folder / "slurm", folder / "bin"
        self.state.mkdir()
        bin_dir.mkdir()
        for command in ("sbatch", "squeue", "scancel"):
            script = bin_dir / command
            script.write_text(f'#!/bin/sh\nexec {sys.executable} {FAKE_SLURM} {self.state} {command} "$@"\n')
            script.chmod(0o755)
        self.env = {k: v for k, v in os.environ.items() if k != "SLURM_JOB_ID"}
        self.env["PATH"] = f"{bin_dir}:{os.environ['PATH']}"
        self.spool = Spool(Path(RunFiles(dir=str(folder)).pilot_spools) / "sweep").create()
        self.keeper_log = folder / "keeper.log"
        with open(self.keeper_log, "w") as log:
            self.keeper = subprocess.Popen(
                [sys.executable, "-m", "spica_lib.pilot.keeper", str(os.getpid()), str(self.spool.root),
                 "--settings", settings.model_dump_json(), "--log-dir", str(folder / "logs")],
                env=self.env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            )  # fmt: skip

    def calls(self, command: str) -> list[list[str]]:
        path = self.state / "calls.log"
        lines = path.read_text().splitlines() if path.exists() else []
        return [call[1:] for call in map(json.loads, lines) if call[0] == command]

    def jobs(self) -> dict[str, int]:
        """SLURM job id -> its pilot's pid."""
        return {p.stem: json.loads(p.read_text())["pid"] for p in (self.state / "jobs").glob("*.json")}

    def pilot_log(self, job: str) -> str:
        path = self.folder / "logs" / f"pilot-{job}.log"
        return path.read_text() if path.exists() else ""

    def close(self) -> None:
        self.keeper.terminate()
        self.keeper.wait(timeout=60)
        for pid in self.jobs().values():
            for process in [p for p in psutil.process_iter() if _session(p) == pid]:
                process.kill()


def _session(process: psutil.Process) -> int | None:
    try:
        return os.getsid(process.pid)
    except OSError:
        return None


@pytest.fixture
def cluster(tmp_path, monkeypatch):
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    made: list[FakeCluster] = []

    def make(settings: PilotSettings = PilotSettings(pilots=1)) -> FakeCluster:
        made.append(FakeCluster(tmp_path, settings))
        return made[-1]

    yield make
    for one in made:
        one.close()


@pytest.fixture
def sweep(tmp_path, monkeypatch):
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    made = Sweep(tmp_path)
    yield made
    made.close()


def rule_script(spool: Spool, job, lost_seconds: float = 3) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k != "SLURM_JOB_ID"}
    return subprocess.Popen(
        [sys.executable, "-c", RULE_SCRIPT, str(spool.root), job.model_dump_json(), str(lost_seconds)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip


def start_pilot(spool: Spool, sweep_lost_seconds: float = 60, **env: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, str(FAKE_HOST), "pilot", str(spool.root), "--needs", NEEDS.model_dump_json(),
         "--minutes", "30", "--idle-seconds", "60", "--sweep-lost-seconds", str(sweep_lost_seconds)],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**{k: v for k, v in os.environ.items() if k != "SLURM_JOB_ID"}, **env},
    )  # fmt: skip


def hand_over(spool: Spool, request_id: str, job, env: dict[str, str] | None = None) -> None:
    """A request as a rule script writes it (private), with an environment of the test's choosing."""
    request = PilotRequest(job=job.rule, args=job.model_dump(mode="json"), cwd=str(Path.cwd()), env=env or {},
                           needs=NEEDS, runtime_minutes=1)  # fmt: skip
    write_private(spool.request(request_id), request.model_dump_json())


# -- a job has one owner at a time ---------------------------------------------------------------


def test_a_rule_script_that_gives_up_on_a_stalled_pilot_has_it_scancelled_and_its_job_ended_before_it_fails(
    cluster, tmp_path
):
    fake = cluster()
    script = rule_script(fake.spool, fake_job("sleep", tmp_path, seconds=120))
    until(lambda: fake.jobs(), what="a pilot submission")
    (job_id, pid), = fake.jobs().items()
    pilot = psutil.Process(pid)
    until(lambda: forked_jobs(pilot), what="the job's start in the pilot")
    (job,) = forked_jobs(pilot)
    pilot.suspend()  # SIGSTOP: a pilot stalled on its file system, or its node swapping; its job runs on
    _, err = script.communicate(timeout=90)
    # Only once the job is ended may Snakemake retry it: the stalled pilot must not run it beside the retry.
    assert script.returncode == 1 and gone(job), err
    assert "waiting for the keeper to scancel it" in err
    assert [job_id] in fake.calls("scancel")
    until(lambda: gone(pilot), what="the pilot's end")


def test_a_pilot_stops_a_job_whose_claim_file_is_gone_and_its_rule_script_fails(sweep, tmp_path):
    pilot = sweep.start_pilot()
    script = rule_script(sweep.spool, fake_job("sleep", tmp_path, seconds=120), lost_seconds=30)
    job = wait_for_job(sweep, pilot)
    (claim,) = (sweep.spool.root / "claimed").iterdir()
    claim.unlink()  # what the rule script's cleanup does when it fails the job: no one waits for it now
    job.wait(timeout=20)
    until(lambda: sweep.beat()["running"] is None, what="the pilot's idling")
    _, err = script.communicate(timeout=60)
    assert script.returncode == 1 and "its request is gone from the spool" in err, err
    assert pilot.is_running()  # it serves on


def test_a_pilot_whose_beat_writes_fail_ends_and_stops_its_job_before_its_rule_script_would_give_up(
    sweep, tmp_path
):
    pilot = start_pilot(sweep.spool, SPICA_FAKE_BEAT_WRITES="4")
    until(lambda: sweep.spool.beats(), what="the pilot's first beat")
    script = rule_script(sweep.spool, fake_job("sleep", tmp_path, seconds=120), lost_seconds=60)
    _, err = script.communicate(timeout=45)  # inside the 60 s after which the rule script gives up itself
    assert script.returncode == 1 and "beat writes in a row failed" in err, err
    output, _ = pilot.communicate(timeout=30)
    assert "Stale file handle (injected)" in output and "started" in output
    assert not (tmp_path / "sleep.out").exists()


def test_a_pilot_that_cannot_write_a_jobs_result_ends_so_the_job_fails_instead_of_waiting(sweep, tmp_path):
    pilot = start_pilot(sweep.spool, SPICA_FAKE_RESULT_WRITES_FAIL="1")
    until(lambda: sweep.spool.beats(), what="the pilot's first beat")
    script = rule_script(sweep.spool, fake_job("report_env", tmp_path), lost_seconds=60)
    _, err = script.communicate(timeout=45)
    assert script.returncode == 1 and "could not write job" in err and "Stale file handle" in err, err
    pilot.wait(timeout=30)


def test_a_rule_script_fails_the_wait_when_the_pilot_that_claimed_its_job_names_another_in_its_beats(
    sweep, tmp_path
):
    script = rule_script(sweep.spool, fake_job("sleep", tmp_path, seconds=1), lost_seconds=60)
    until(lambda: sweep.spool.waiting(), what="the request")
    ((request_id, path),) = sweep.spool.waiting()
    os.rename(path, sweep.spool.claimed(request_id, "777"))  # claimed, but pilot 777 runs something else
    for count in range(1, 200):
        beat = PilotBeat(beat=count, pilot="777", node="n", needs=NEEDS, running="another-request", seconds_left=600)
        write_private(sweep.spool.beat("777"), beat.model_dump_json())
        if script.poll() is not None:
            break
        time.sleep(0.2)
    _, err = script.communicate(timeout=10)
    assert script.returncode == 1 and "name job another-request; it is not running this one" in err, err
    assert sweep.spool.cancel(request_id).exists() or not sweep.spool.claim_of(request_id)


@pytest.mark.parametrize("renamed", [True, False], ids=["rename done (NFS retransmit)", "taken by another pilot"])
def test_enoent_on_a_claim_is_checked_against_the_claimed_file(tmp_path, monkeypatch, renamed):
    spool = Spool(Path(RunFiles(dir=str(tmp_path)).pilot_spools) / "sweep").create()
    hand_over(spool, "r1", fake_job("sleep", tmp_path, seconds=0))
    pilot = node_module.Pilot(spool, NEEDS, minutes=30, idle_seconds=60, name="p1")
    real_rename = os.rename

    def rename_answering_enoent(source, target):
        if renamed:
            real_rename(source, target)
        else:
            Path(source).unlink()  # another pilot's rename won
        raise FileNotFoundError(errno.ENOENT, "No such file or directory", str(source))

    begun = []
    monkeypatch.setattr(node_module.os, "rename", rename_answering_enoent)
    monkeypatch.setattr(pilot, "_begin", lambda request_id, request: begun.append(request_id))
    pilot._take()
    assert begun == (["r1"] if renamed else [])


# -- the keeper ----------------------------------------------------------------------------------


def test_the_keeper_survives_io_errors_and_only_its_stop_ends_it(tmp_path, monkeypatch, capfd):
    spool = Spool(Path(RunFiles(dir=str(tmp_path)).pilot_spools) / "sweep").create()
    keeper = keeper_module.Keeper(spool, PilotSettings(pilots=1), tmp_path / "logs")
    heartbeat_writes, real_write = [], keeper_module.write_private

    def flaky_write(path, text):
        heartbeat_writes.append(path)
        if len(heartbeat_writes) <= 3:
            raise OSError(errno.ESTALE, "Stale file handle", str(path))
        real_write(path, text)

    real_waiting = spool.waiting
    listings = []

    def flaky_waiting():
        listings.append(1)
        if len(listings) <= 2:
            raise OSError(errno.EIO, "Input/output error")
        return real_waiting()

    passes = []

    def sleep_then_stop(seconds):
        passes.append(seconds)
        if len(passes) >= 30:
            raise keeper_module._Stop()

    monkeypatch.setattr(keeper_module, "write_private", flaky_write)
    monkeypatch.setattr(spool, "waiting", flaky_waiting)
    monkeypatch.setattr(keeper_module.time, "sleep", sleep_then_stop)
    with pytest.raises(keeper_module._Stop):
        keeper.serve()
    assert spool.heartbeat.read_text() == str(keeper.beats) and len(listings) == 30
    err = capfd.readouterr().err
    assert err.count("Stale file handle") == 1 and err.count("Input/output error") == 1, err  # logged once each


# -- a pilot's time ------------------------------------------------------------------------------


def test_squeue_time_left_is_read_in_its_forms_and_the_keeper_asks_for_the_start_up_too():
    assert parse_time_left("1:30") == 90
    assert parse_time_left("01:00:05") == 3605
    assert parse_time_left("2-00:00:01") == 2 * 86400 + 1
    assert parse_time_left("UNLIMITED") is None and parse_time_left("NOT_SET") is None
    assert pilot_minutes(1, at_least=120) == 120
    assert pilot_minutes(60, at_least=1) == 66  # 60 min + 60 s margin + 300 s start-up


def test_a_pilot_counts_the_time_slurm_says_it_has_left_and_a_job_no_pilot_can_take_fails_saying_why(
    cluster, tmp_path
):
    fake = cluster(PilotSettings(pilots=1, minutes=1))
    (fake.state / "time_left").write_text("1:30")  # a slow start: 90 s of the 7 min asked for are left
    script = rule_script(fake.spool, fake_job("sleep", tmp_path, seconds=1), lost_seconds=60)
    _, err = script.communicate(timeout=90)
    assert script.returncode == 1 and "can take this job" in err and "1.5 min left once started" in err, err
    assert [call for call in fake.calls("sbatch") if "--time=7" in call] == fake.calls("sbatch")  # start-up asked for
    assert len(fake.calls("sbatch")) == 1  # not submitted again and again
    (job_id,) = fake.jobs()
    assert "SLURM says 90 s left" in fake.pilot_log(job_id)
    assert not (tmp_path / "sleep.out").exists()


@pytest.mark.parametrize("reason", ["PartitionTimeLimit", "PartitionConfig"])  # too long; more than a node has
def test_a_pilot_slurm_keeps_pending_for_a_limit_it_exceeds_is_cancelled_and_its_job_fails_saying_why(
    cluster, tmp_path, reason
):
    fake = cluster()
    (fake.state / "pending_reason").write_text(reason)  # accepted, never started
    script = rule_script(fake.spool, fake_job("sleep", tmp_path, seconds=1), lost_seconds=60)
    _, err = script.communicate(timeout=90)
    assert script.returncode == 1 and "SLURM will not start pilot job 1000" in err, err
    assert f"pending for {reason}" in err
    assert fake.calls("scancel") == [["1000"]] and len(fake.calls("sbatch")) == 1


def test_a_keeper_stopped_while_sbatch_is_answering_still_cancels_the_pilot_it_submitted(cluster, tmp_path):
    """The sweep's end (SIGTERM from the dying Snakemake) can come while SLURM has accepted a pilot and sbatch has
    not yet printed its id: the keeper must learn the id and scancel that pilot, not leave it queued."""
    fake = cluster()
    (fake.state / "pending_reason").write_text("Resources")  # stays queued until scancelled, as on a busy cluster
    (fake.state / "sbatch_seconds").write_text("3")
    hand_over(fake.spool, "waiting", fake_job("sleep", tmp_path, seconds=1))
    until(lambda: (fake.state / "sbatch_accepted").exists(), what="SLURM's accepting a pilot")
    fake.keeper.terminate()
    fake.keeper.wait(timeout=60)
    assert list(fake.jobs()) == ["1000"] and fake.calls("scancel") == [["1000"]], fake.keeper_log.read_text()
    assert not fake.spool.root.exists()


# -- a pilot's lifetime --------------------------------------------------------------------------


def test_a_pilot_takes_no_job_before_it_has_seen_the_sweeps_heartbeat_change(tmp_path):
    spool = Spool(Path(RunFiles(dir=str(tmp_path)).pilot_spools) / "sweep").create()
    write_private(spool.heartbeat, "41")  # a killed keeper's last beat
    hand_over(spool, "left-over", fake_job("report_env", tmp_path))
    pilot = start_pilot(spool, sweep_lost_seconds=3)
    output, _ = pilot.communicate(timeout=60)
    assert "ending: the sweep's heartbeat stopped for 3 s" in output
    assert [request_id for request_id, _ in spool.waiting()] == ["left-over"]
    assert not (tmp_path / "report_env.out").exists()


def test_a_pilot_checks_its_end_conditions_while_a_job_warms_up(sweep, tmp_path):
    pilot = sweep.start_pilot()
    script = rule_script(sweep.spool, fake_job("slow_warm_up", tmp_path, warm_up_seconds=300, seconds=0))
    until(lambda: sweep.beat()["running"] is not None, what="the warm-up's start")
    write_private(sweep.spool.stop_file, "stop")
    pilot.wait(timeout=30)  # not the warm-up's 300 s
    _, err = script.communicate(timeout=30)
    assert script.returncode == 1 and "was stopped while it ran this job: the sweep ended" in err, err
    assert not (tmp_path / "slow_warm_up.out").exists()


def test_a_job_cancelled_while_it_warms_up_is_not_forked_and_the_pilot_serves_on(sweep, tmp_path):
    pilot = sweep.start_pilot()
    script = rule_script(sweep.spool, fake_job("slow_warm_up", tmp_path, warm_up_seconds=3, seconds=0))
    until(lambda: sweep.beat()["running"] is not None, what="the warm-up's start")
    script.send_signal(signal.SIGTERM)
    script.communicate(timeout=30)
    assert script.returncode == 1
    until(lambda: sweep.beat()["running"] is None, what="the pilot's idling")
    time.sleep(4)  # the warm-up's end: its job must not be forked then
    assert pilot.is_running() and pilot.children() == [] and not (tmp_path / "slow_warm_up.out").exists()


def test_after_a_hung_warm_up_a_pilot_forks_no_more_and_ends(sweep, tmp_path):
    pilot = sweep.start_pilot()
    script = rule_script(sweep.spool, fake_job("hanging_warm_up", tmp_path))  # the fake's limit: 1 s
    _, err = script.communicate(timeout=60)
    assert script.returncode == 1 and "its warm-up hung in pilot job" in err, err
    pilot.wait(timeout=30)
    assert sweep.beat()["gone"].startswith("a warm-up hung in it") and sweep.beat()["jobs_run"] == 0
    assert not (tmp_path / "hanging_warm_up.out").exists()


# -- a private spool -----------------------------------------------------------------------------


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_the_spool_is_private_from_creation_and_a_removed_spool_stays_removed(tmp_path, capfd):
    previous = os.umask(0)  # the most open umask: nothing may depend on it
    try:
        spool = Spool(Path(RunFiles(dir=str(tmp_path / "run")).pilot_spools) / "sweep").create()
        write_private(spool.heartbeat, "1")
        touch_private(spool.cancel("r"))
    finally:
        os.umask(previous)
    folders = [spool.root.parent, spool.root, *(p for p in spool.root.iterdir() if p.is_dir())]
    assert len(folders) == 8 and {mode(p) for p in folders} == {0o700}
    assert mode(spool.heartbeat) == mode(spool.cancel("r")) == 0o600
    spool.remove()
    with pytest.raises(FileNotFoundError):
        write_private(spool.beat("p"), "{}")
    job = fake_job("sleep", tmp_path, seconds=0)
    assert run_on_pilot("sleep", job, str(spool.root)) == 1
    err = capfd.readouterr().err
    assert f"the sweep's pilot spool {spool.root} is gone; this sleep job was not run" in err
    assert not spool.root.exists()


def test_a_request_is_read_only_when_it_is_the_users_own_and_no_one_elses(tmp_path, monkeypatch):
    spool = Spool(Path(RunFiles(dir=str(tmp_path)).pilot_spools) / "sweep").create()
    hand_over(spool, "r", fake_job("sleep", tmp_path, seconds=0))
    assert read_request(spool.request("r")).job == "sleep"
    os.chmod(spool.request("r"), 0o644)
    with pytest.raises(PrivacyError, match=r"has mode 0644; only its owner may read or write it"):
        read_request(spool.request("r"))
    os.chmod(spool.request("r"), 0o600)
    monkeypatch.setattr(os, "getuid", lambda: 4242)
    with pytest.raises(PrivacyError, match=r"belongs to uid \d+, not to this user \(uid 4242\)"):
        read_request(spool.request("r"))


def test_a_pilot_takes_no_request_another_user_could_have_written(sweep, tmp_path):
    hand_over(sweep.spool, "open", fake_job("report_env", tmp_path))
    os.chmod(sweep.spool.request("open"), 0o666)
    pilot = start_pilot(sweep.spool)
    until(lambda: sweep.spool.beats(), what="the pilot's first beat")
    line = ""
    deadline = time.time() + 30
    while time.time() < deadline and "not taking request open" not in line:
        line = pilot.stdout.readline()
    assert "not taking request open" in line and "has mode 0666" in line, line
    assert [request_id for request_id, _ in sweep.spool.waiting()] == ["open"]
    os.chmod(sweep.spool.root, 0o755)  # the spool itself opened up: the pilot runs nothing from it
    output, _ = pilot.communicate(timeout=30)
    assert "its spool is not private" in output
    assert not (tmp_path / "report_env.out").exists()


def test_a_job_in_a_pilot_gets_only_the_job_variables_of_its_request_as_in_the_local_host(sweep, tmp_path):
    sweep.start_pilot()
    env = {"LD_PRELOAD": "/nowhere/evil.so", "PATH": "/nowhere", "PYTHONPATH": "/nowhere",
           "SPICA_TEST_MARK": "kept", "TMPDIR": "/tmp"}  # fmt: skip
    hand_over(sweep.spool, "r", fake_job("report_env", tmp_path), env=env)
    until(lambda: sweep.spool.result("r").exists(), what="the job's end")
    seen = json.loads((tmp_path / "report_env.out").read_text())["env"]
    assert seen["SPICA_TEST_MARK"] == "kept" and seen["TMPDIR"] == "/tmp"
    assert "LD_PRELOAD" not in seen and seen.get("PATH") != "/nowhere" and seen.get("PYTHONPATH") != "/nowhere"
