"""Pilot jobs' own control flow, on this machine: the spool between a rule script and a pilot, how a pilot
ends (idle, sweep gone, stop file, SIGTERM, SIGKILL), and the keeper's settings and lifetime.

The pilots here run the fake jobs of tests/fake_host.py (named so) outside SLURM; tests/test_slurm.py
runs real pilots with real replays on the CI cluster.
"""

import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import psutil
import pytest

from spica_lib.run.layout import RunFiles
from spica_lib.pilot.settings import PilotSettings, PilotSettingsError, check_executor, pilot_settings
from spica_lib.pilot.spool import PilotBeat, PilotClass, PilotRequest, Spool, write_private
from spica_lib.pilot.waiter import needs_of, run_on_pilot
from spica_lib.run.job_args import JobArgs

FAKE_HOST = Path(__file__).parent / "fake_host.py"
NEEDS = PilotClass(cpus=2, mem_mb=8000, partition="cpu")


# -- settings ------------------------------------------------------------------------------------


def test_pilot_settings_come_from_the_replay_resources_and_a_bad_one_is_refused_by_name():
    assert not pilot_settings({"trials_per_job": 4}).on
    settings = pilot_settings({"pilots": 3, "pilot_idle_seconds": 20, "pilot_minutes": 30})
    assert (settings.pilots, settings.idle_seconds, settings.minutes) == (3, 20, 30)
    with pytest.raises(PilotSettingsError, match=r"replay:pilots must be a whole number >= 0, got -1"):
        pilot_settings({"pilots": -1})
    with pytest.raises(PilotSettingsError, match=r"replay:pilot_minutes must be a whole number >= 1, got 'long'"):
        pilot_settings({"pilots": 1, "pilot_minutes": "long"})
    with pytest.raises(PilotSettingsError, match=r"pilot_idle_seconds does nothing without replay:pilots >= 1"):
        pilot_settings({"pilot_idle_seconds": 20})


def test_pilots_asked_for_outside_slurm_are_an_error_not_a_silent_no_op():
    check_executor(PilotSettings(pilots=2), "slurm")
    check_executor(PilotSettings(pilots=0), "local")
    with pytest.raises(PilotSettingsError, match=r"replay:pilots=2 needs the slurm executor \(this run uses local\)"):
        check_executor(PilotSettings(pilots=2), "local")


def test_a_pilot_runs_a_job_that_asked_for_no_more_than_it_has_and_the_same_partition():
    assert NEEDS.holds(PilotClass(cpus=1, mem_mb=4000, partition="cpu"))
    assert not NEEDS.holds(PilotClass(cpus=4, mem_mb=4000, partition="cpu"))
    assert not NEEDS.holds(PilotClass(cpus=2, mem_mb=9000, partition="cpu"))
    assert not NEEDS.holds(PilotClass(cpus=2, mem_mb=8000, partition="gpu"))
    assert not NEEDS.holds(PilotClass(cpus=2, mem_mb=8000, partition="cpu", gres="gpu:1"))


def test_a_jobs_needs_are_its_threads_and_its_slurm_resources():
    job = fake_job("sleep", Path("/tmp"), seconds=0).model_copy(
        update={"threads": 2, "resources": {"mem_mb": 8000, "slurm_partition": "cpu", "runtime": 12}}
    )
    assert needs_of(job) == NEEDS


# -- a pilot and its rule scripts ----------------------------------------------------------------


def fake_job(rule: str, folder: Path, **params) -> JobArgs:
    return JobArgs(
        rule=rule,
        input={},
        output={"out": str(folder / f"{rule}.out")},
        params=params,
        wildcards={},
        log=[],
        threads=2,
        resources={"mem_mb": 8000, "slurm_partition": "cpu", "runtime": 1},
    )


class Sweep:
    """A spool with a heartbeat and the ending of pilots given up on (the keeper's part, minus SLURM: a pilot
    is "scancelled" by SIGKILL, and "no longer listed" once its process is gone), and fake pilots started on it."""

    def __init__(self, folder: Path):
        self.spool = Spool(Path(RunFiles(dir=str(folder)).pilot_spools) / "sweep").create()
        self.beating = threading.Event()
        self.beating.set()
        self.ended = threading.Event()
        self.thread = threading.Thread(target=self._beat, daemon=True)
        self.thread.start()
        self.pilots: list[subprocess.Popen] = []

    def _beat(self):
        count = 0
        while not self.ended.wait(0.2):
            if self.beating.is_set():
                count += 1
                with contextlib.suppress(FileNotFoundError):  # the spool removed by a test
                    write_private(self.spool.heartbeat, str(count))
            with contextlib.suppress(FileNotFoundError):
                for name in self.spool.abandoned():
                    self._end(name)

    def _end(self, name: str) -> None:
        process = next((p for p in self.pilots if f"local{p.pid}" == name), None)
        if process is not None and process.poll() is None:
            process.kill()
        elif not self.spool.ended(name).exists():
            write_private(self.spool.ended(name), "gone")

    def start_pilot(self, idle_seconds: float = 60, sweep_lost_seconds: float = 60) -> psutil.Process:
        env = {k: v for k, v in os.environ.items() if k != "SLURM_JOB_ID"}
        process = subprocess.Popen(
            [sys.executable, str(FAKE_HOST), "pilot", str(self.spool.root), "--needs", NEEDS.model_dump_json(),
             "--minutes", "30", "--idle-seconds", str(idle_seconds), "--sweep-lost-seconds", str(sweep_lost_seconds)],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
        )  # fmt: skip
        self.pilots.append(process)
        deadline = time.time() + 30
        while time.time() < deadline and not self.spool.beats():
            time.sleep(0.05)
        return psutil.Process(process.pid)

    def beat(self) -> dict:
        (only,) = self.spool.beats().values()
        return only.model_dump()

    def close(self):
        self.ended.set()
        for process in self.pilots:
            if process.poll() is None:
                process.kill()
            process.wait(timeout=30)


@pytest.fixture
def sweep(tmp_path, monkeypatch):
    monkeypatch.setenv("SPICA_TEST_MARK", "from the rule script")
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    made = Sweep(tmp_path)
    yield made
    made.close()


def leftovers(spool: Spool) -> list[str]:
    """Files of finished requests still in the spool (a done request leaves none)."""
    folders = ("requests", "claimed", "output", "results", "cancel")
    return [str(p) for folder in folders for p in (spool.root / folder).iterdir()]


def test_a_pilot_runs_the_job_a_rule_script_hands_it_with_the_scripts_variables_and_the_spool_is_left_clean(
    sweep, tmp_path, monkeypatch
):
    pilot = sweep.start_pilot()
    monkeypatch.chdir(tmp_path)
    assert run_on_pilot("report_env", fake_job("report_env", tmp_path), str(sweep.spool.root)) == 0
    seen = json.loads((tmp_path / "report_env.out").read_text())
    assert seen["env"]["SPICA_TEST_MARK"] == "from the rule script" and seen["cwd"] == str(tmp_path)
    assert leftovers(sweep.spool) == []
    assert pilot.is_running() and pilot.children() == [] and sweep.beat()["running"] is None


def test_a_job_that_fails_in_a_pilot_fails_the_rule_script_with_its_stderr(sweep, tmp_path, capfd):
    sweep.start_pilot()
    code = run_on_pilot("sleep", fake_job("sleep", tmp_path, seconds="not a number"), str(sweep.spool.root))
    assert code == 1
    assert "could not convert string to float" in capfd.readouterr().err
    assert leftovers(sweep.spool) == []


def wait_for_job(sweep: Sweep, pilot: psutil.Process) -> psutil.Process:
    deadline = time.time() + 30
    while time.time() < deadline and not (pilot.children() and sweep.beat()["running"]):
        time.sleep(0.05)
    assert pilot.children(), "the pilot did not start the job"
    return pilot.children()[0]


# A rule script in its own process, as Snakemake runs one: hand a job to the spool, exit with its code.
RULE_SCRIPT = textwrap.dedent(
    """
    import sys
    from spica_lib.pilot import spool
    from spica_lib.pilot.waiter import run_on_pilot
    from spica_lib.run.job_args import JobArgs
    spool.LOST_SECONDS = float(sys.argv[3])
    job = JobArgs.model_validate_json(sys.argv[2])
    sys.exit(run_on_pilot(job.rule, job, sys.argv[1]))
    """
)


def rule_script(sweep: Sweep, job: JobArgs) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", RULE_SCRIPT, str(sweep.spool.root), job.model_dump_json(), "3"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def test_a_pilot_stopped_by_slurm_stops_its_job_and_fails_it_at_once_so_snakemake_retries(sweep, tmp_path):
    pilot = sweep.start_pilot()
    script = rule_script(sweep, fake_job("sleep", tmp_path, seconds=120))
    job = wait_for_job(sweep, pilot)
    started = time.time()
    pilot.send_signal(signal.SIGTERM)  # what scancel, preemption and the time limit send
    _, err = script.communicate(timeout=60)
    assert script.returncode == 1 and time.time() - started < 15, err
    assert "was stopped while it ran this job: stopped by SIGTERM" in err
    job.wait(timeout=10)
    pilot.wait(timeout=10)
    assert sweep.beat()["gone"].startswith("stopped by SIGTERM")
    assert not (tmp_path / "sleep.out").exists() and leftovers(sweep.spool) == []


def test_a_pilot_lost_outright_fails_its_job_once_its_beat_goes_quiet_and_takes_the_job_with_it(sweep, tmp_path):
    pilot = sweep.start_pilot()
    script = rule_script(sweep, fake_job("sleep", tmp_path, seconds=120))
    job = wait_for_job(sweep, pilot)
    pilot.kill()  # the node is lost: no goodbye, no result
    _, err = script.communicate(timeout=60)
    assert script.returncode == 1 and "was lost while it ran this job (no heartbeat for 3 s)" in err, err
    job.wait(timeout=10)  # the job dies with its pilot (PR_SET_PDEATHSIG)
    assert leftovers(sweep.spool) == []


def test_a_rule_script_snakemake_stops_has_the_pilot_stop_its_job_and_the_pilot_serves_on(sweep, tmp_path):
    pilot = sweep.start_pilot()
    script = rule_script(sweep, fake_job("sleep", tmp_path, seconds=120))
    job = wait_for_job(sweep, pilot)
    script.send_signal(signal.SIGTERM)
    script.communicate(timeout=60)
    assert script.returncode == 1
    job.wait(timeout=15)
    deadline = time.time() + 10
    while time.time() < deadline and sweep.beat()["running"] is not None:
        time.sleep(0.05)
    assert pilot.is_running() and pilot.children() == [] and sweep.beat()["running"] is None
    assert leftovers(sweep.spool) == []


def test_a_rule_script_stopped_before_a_pilot_took_its_job_takes_the_request_back(sweep, tmp_path):
    script = rule_script(sweep, fake_job("sleep", tmp_path, seconds=120))  # no pilot yet
    deadline = time.time() + 30
    while time.time() < deadline and not sweep.spool.waiting():
        time.sleep(0.05)
    script.send_signal(signal.SIGTERM)
    script.communicate(timeout=60)
    assert script.returncode == 1 and leftovers(sweep.spool) == []


@pytest.mark.parametrize("ending", ["idle", "heartbeat stops", "stop file", "retired", "spool removed"])
def test_a_pilot_ends_by_itself_when_idle_or_when_its_sweep_is_gone(sweep, ending):
    pilot = sweep.start_pilot(idle_seconds=2 if ending == "idle" else 60, sweep_lost_seconds=2)
    if ending == "heartbeat stops":
        sweep.beating.clear()
    elif ending == "stop file":
        sweep.spool.stop_file.write_text("stop")
    elif ending == "retired":
        (pilot_id,) = sweep.spool.beats()
        sweep.spool.retire(pilot_id).touch()
    elif ending == "spool removed":
        sweep.spool.remove()
    pilot.wait(timeout=30)
    if ending != "spool removed":
        reason = sweep.beat()["gone"]
        expected = {"idle": "nothing to run for 2 s", "heartbeat stops": "the sweep's heartbeat stopped for 2 s",
                    "stop file": "the sweep ended",
                    "retired": "retired to make room for a pilot that can run a waiting job"}[ending]  # fmt: skip
        assert reason == expected


# -- the keeper ----------------------------------------------------------------------------------

OWNER = textwrap.dedent(
    """
    import sys, time
    from spica_lib.pilot import launch
    from spica_lib.pilot.settings import PilotSettings
    launch.start_keeper(sys.argv[1], PilotSettings(pilots=2))
    print(launch._keeper.pid, flush=True)
    time.sleep(600)
    """
)


@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGTERM])
def test_the_keeper_dies_with_the_sweep_and_removes_its_spool(tmp_path, signum):
    owner = subprocess.Popen([sys.executable, "-c", OWNER, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    keeper = psutil.Process(int(owner.stdout.readline()))
    deadline = time.time() + 30
    while time.time() < deadline and not list((Path(RunFiles(dir=str(tmp_path)).pilot_spools)).glob("*/heartbeat")):
        time.sleep(0.05)
    assert list((Path(RunFiles(dir=str(tmp_path)).pilot_spools)).glob("*/heartbeat")), "the keeper wrote no heartbeat"
    assert oct((Path(RunFiles(dir=str(tmp_path)).pilot_spools)).stat().st_mode & 0o777) == "0o700"  # no other user reaches a pilot's jobs
    owner.send_signal(signum)
    owner.wait(timeout=30)
    keeper.wait(timeout=30)
    assert not (Path(RunFiles(dir=str(tmp_path)).pilot_spools)).exists()


def test_when_slurm_takes_no_pilot_the_waiting_job_fails_saying_why(tmp_path, monkeypatch):
    bare = tmp_path / "bin"  # no sbatch here
    bare.mkdir()
    spool = Spool(Path(RunFiles(dir=str(tmp_path)).pilot_spools) / "sweep").create()
    keeper = subprocess.Popen(
        [sys.executable, "-m", "spica_lib.pilot.keeper", str(os.getpid()), str(spool.root),
         "--settings", PilotSettings(pilots=1).model_dump_json(), "--log-dir", str(tmp_path / "logs")],
        env={**os.environ, "PATH": str(bare)}, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        script = subprocess.run(
            [sys.executable, "-c", RULE_SCRIPT, str(spool.root), fake_job("sleep", tmp_path, seconds=1).model_dump_json(),
             "3"],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert script.returncode == 1 and "sbatch failed" in script.stderr, script.stderr
    finally:
        keeper.terminate()
        keeper.wait(timeout=30)
    assert not (Path(RunFiles(dir=str(tmp_path)).pilot_spools)).exists()


class KeeperWithFakeSbatch:
    """The keeper's submission policy with `sbatch` replaced by a list (a fake, named so)."""

    def __init__(self, folder: Path, pilots: int):
        from spica_lib.pilot.keeper import Keeper

        self.spool = Spool(Path(RunFiles(dir=str(folder)).pilot_spools) / "sweep").create()
        self.keeper = Keeper(self.spool, PilotSettings(pilots=pilots), folder / "logs")
        self.submissions: list[PilotClass] = []

        def fake_sbatch(needs, minutes):
            job = str(100 + len(self.submissions))
            self.submissions.append(needs)
            self.keeper.submitted[job] = needs
            return job

        self.keeper._submit = fake_sbatch

    def wait(self, request_id: str, needs: PilotClass) -> None:
        request = PilotRequest(job="replay", args={}, cwd="/", env={}, needs=needs, runtime_minutes=5)
        write_private(self.spool.request(request_id), request.model_dump_json())

    def beat(self, job: str, running: str | None = None) -> None:
        beat = PilotBeat(beat=1, pilot=job, node="n", needs=self.keeper.submitted[job], running=running,
                         seconds_left=3600)  # fmt: skip
        write_private(self.spool.beat(job), beat.model_dump_json())


def test_the_keeper_submits_a_pilot_only_for_a_job_no_free_pilot_can_run_and_makes_room_at_its_limit(tmp_path):
    small = PilotClass(cpus=1, mem_mb=4000, partition="cpu")
    sweep = KeeperWithFakeSbatch(tmp_path, pilots=2)
    sweep.wait("1", NEEDS)
    sweep.keeper._submit_as_needed()
    sweep.keeper._submit_as_needed()  # the pilot submitted for it is starting: not submitted twice
    sweep.beat("100")
    sweep.keeper._submit_as_needed()  # it is up and idle: it will take the job
    assert sweep.submissions == [NEEDS]
    take(sweep, "100", "1")
    sweep.wait("2", small)  # the only pilot is busy: one of the job's own size is submitted
    sweep.keeper._submit_as_needed()
    assert sweep.submissions == [NEEDS, small]
    take(sweep, "101", "2")
    sweep.beat("100")  # done with its job
    sweep.wait("3", small)  # the idle 2-CPU pilot can run it: nothing submitted
    sweep.keeper._submit_as_needed()
    assert sweep.submissions == [NEEDS, small]
    take(sweep, "100", "3")
    sweep.beat("101")
    sweep.wait("4", NEEDS)  # at the limit; the idle pilot is too small for it: it is retired to make room
    sweep.keeper._submit_as_needed()
    assert sweep.submissions == [NEEDS, small] and sweep.spool.retire("101").exists()
    assert not sweep.spool.retire("100").exists()  # the busy one runs on


def test_an_idle_pilot_too_small_for_a_job_that_waits_for_a_starting_pilot_gives_its_cpus_back(tmp_path):
    small = PilotClass(cpus=1, mem_mb=4000, partition="cpu")
    sweep = KeeperWithFakeSbatch(tmp_path, pilots=4)
    sweep.wait("1", small)
    sweep.keeper._submit_as_needed()
    take(sweep, "100", "1")
    sweep.wait("2", NEEDS)  # the small pilot is busy: a big one is submitted, and starts later
    sweep.keeper._submit_as_needed()
    assert sweep.submissions == [small, NEEDS] and not sweep.spool.retire("100").exists()
    sweep.beat("100")  # the small one is done while the big one still waits for CPUs
    sweep.keeper._submit_as_needed()
    assert sweep.submissions == [small, NEEDS] and sweep.spool.retire("100").exists()


def take(sweep: KeeperWithFakeSbatch, pilot: str, request_id: str) -> None:
    sweep.spool.request(request_id).unlink()
    sweep.beat(pilot, running=request_id)
