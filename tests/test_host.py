"""The sweep's warm host: who may use it, what reaches the rule script, and that it never outlives its owner."""

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest
from conftest import TRACE, write_yaml

from spica_lib.base.artifacts import read_model, write_model
from spica_lib.traces import scan
from spica_lib.config.validate import build_validated_config
from spica_lib.host import launch
from spica_lib.host.client import ADDRESS_VARIABLE, delegate, host_address, job_environment
from spica_lib.host.registry import JOBS
from spica_lib.run.job_args import JobArgs
from spica_lib.trial.spec import TrialSpec


def test_a_job_uses_the_host_only_under_the_slurm_job_it_was_started_in(monkeypatch):
    monkeypatch.setenv(ADDRESS_VARIABLE, "spica-host-1@")
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    assert host_address() == "spica-host-1"
    monkeypatch.setenv("SLURM_JOB_ID", "77")  # a job SLURM runs for a host started outside SLURM
    assert host_address() is None
    monkeypatch.setenv(ADDRESS_VARIABLE, "spica-host-1@77")  # e.g. `snakemake --cores` inside an allocation
    assert host_address() == "spica-host-1"
    monkeypatch.setenv(ADDRESS_VARIABLE, "off")
    assert host_address() is None


def test_with_no_host_listening_the_job_runs_where_it_is(monkeypatch):
    monkeypatch.setenv(ADDRESS_VARIABLE, f"spica-host-nobody-{os.getpid()}@")
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    assert delegate("tell", {}) is None  # nothing ran: the caller runs the job itself


@pytest.fixture
def host(monkeypatch):
    monkeypatch.delenv(ADDRESS_VARIABLE, raising=False)
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    launch.start_host()
    process = psutil.Process(launch._host.pid)
    name = os.environ[ADDRESS_VARIABLE].partition("@")[0]
    deadline = time.time() + 30
    while time.time() < deadline and f"@{name}" not in Path("/proc/net/unix").read_text():
        time.sleep(0.05)  # until it listens (a job that comes earlier runs itself)
    yield process
    launch.stop_host()


def broken_tell_job(tmp_path):
    return JobArgs(
        rule="tell",
        input={"config": str(tmp_path / "missing.json"), "suggestions": str(tmp_path / "missing.json")},
        output={"history": str(tmp_path / "history.json")},
        params={"run_dir": str(tmp_path)},
        wildcards={"branch": "agg", "round": "0"},
        log=[str(tmp_path / "tell.log")],
        threads=1,
        resources={},
    )


def test_a_job_failing_in_the_host_fails_the_rule_script_with_its_traceback_on_the_scripts_stderr(
    host, tmp_path, capfd
):
    code = delegate("tell", broken_tell_job(tmp_path).model_dump(mode="json"))
    assert code == 1
    assert "FileNotFoundError" in capfd.readouterr().err and "missing.json" in (tmp_path / "tell.log").read_text()
    assert host.is_running() and host.children() == []  # the host serves on; the job's child is gone
    launch.stop_host()
    host.wait(timeout=30)
    assert not host.is_running()
    assert delegate("tell", broken_tell_job(tmp_path).model_dump(mode="json")) is None  # stopped: jobs run themselves


OWNER = textwrap.dedent(
    """
    import sys, time
    from spica_lib.host import launch
    launch.start_host()
    print(launch._host.pid, flush=True)
    time.sleep(600)
    """
)


@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGTERM])
def test_the_host_dies_with_the_process_that_started_it(signum):
    env = {k: v for k, v in os.environ.items() if k not in (ADDRESS_VARIABLE, "SLURM_JOB_ID")}
    owner = subprocess.Popen([sys.executable, "-c", OWNER], stdout=subprocess.PIPE, text=True, env=env)
    host = psutil.Process(int(owner.stdout.readline()))
    owner.send_signal(signum)
    owner.wait(timeout=30)
    host.wait(timeout=30)  # psutil.TimeoutExpired if it outlived its owner
    assert not host.is_running()


def test_the_host_scans_the_runs_trace_before_it_forks_a_suggest(tmp_path):
    config = write_yaml(tmp_path, {**trace_config(), "workload": {"trace_path": str(TRACE)}})
    write_model(tmp_path / "config.json", build_validated_config(config))
    job = broken_tell_job(tmp_path).model_copy(
        update={"rule": "suggest", "input": {"config": str(tmp_path / "config.json")}, "wildcards": {"round": "1"}}
    )
    scan._scan.cache_clear()
    JOBS["suggest"].prepare_step()(job)  # what the host runs before it forks the job
    assert scan._scan.cache_info().currsize == 1
    scan.scan_trace(TRACE)  # as a forked suggest would: found, not read again
    assert scan._scan.cache_info().misses == 1


def stage_job(rule, files, **named):
    """The job of a stage before round 0 (spica_lib/run/jobs/setup.py) or of a suggest, in run folder `files`."""
    inputs = {
        "config": files.config_json,
        "policies": files.policies_json,
        "predictor": files.load_predictor_json,
        "branch": files.branch_json("agg"),
        "pool": files.pool_parquet("agg"),
    }
    return JobArgs(rule=rule, input={**inputs, **named.pop("input", {})}, log=[files.log(rule)], threads=1,
                   resources={}, **{"output": {}, "params": {}, "wildcards": {}, **named})  # fmt: skip


def test_the_host_compiles_round_0s_static_estimate_before_it_forks_a_suggest_and_warms_its_branch_ahead(tmp_path):
    from spica_lib.replay.request import replay_call
    from spica_lib.replay.warm_up import _WARMED, warm_up_groups
    from spica_lib.run.jobs.setup import STAGES
    from spica_lib.run.layout import RunFiles
    from spica_lib.search import warm_start

    files = RunFiles(dir=str(tmp_path / "run"))
    space = {**trace_config()["search_space"], "deployment_mode": ["agg"], "backend": ["vllm", "sglang"]}
    workload = {"isl": 1024, "osl": 128, "request_rate": 4.0, "num_request_ratio": 10}
    config = write_yaml(tmp_path, {"search_space": space, "workload": workload})
    modes = {"modes": ["agg"]}
    STAGES["validate"](stage_job("validate", files, input={"config": str(config)}, output={"config": files.config_json},
                                 params={"run": "test"}))  # fmt: skip
    STAGES["policies"](stage_job("policies", files, output={"policies": files.policies_json}))
    STAGES["branches"](stage_job("branches", files, params=modes, output={"pools": [files.pool_parquet("agg")],
                                 "specs": [files.branch_json("agg")]}))  # fmt: skip
    STAGES["load_predictor"](stage_job("load_predictor", files, output={"table": files.load_predictor_parquet,
                                       "result": files.load_predictor_json}))  # fmt: skip
    suggest = stage_job("suggest", files, wildcards={"branch": "agg", "round": "0"}, params={"run_dir": files.dir,
                        "trials_per_job": None}, output={"suggestions": files.suggestions("agg", 0),
                        "specs": files.round_specs("agg", 0)})  # fmt: skip
    warm_start._STEP_MODELS.clear()
    JOBS["suggest"].prepare_step()(suggest)  # what the host runs before it forks the job
    (model,) = warm_start._STEP_MODELS.values()
    compiled = dict(model._engines)
    assert compiled
    JOBS["suggest"].run(suggest)  # the job itself, as its fork runs it: it finds every engine compiled
    assert dict(model._engines) == compiled
    # Ahead, while the suggest runs: a warm-up per backend of the branch, covering what round 0's seeds replay.
    steps = JOBS["suggest"].steps_ahead(suggest)
    assert len(steps) == 2
    for step in steps:
        step()
    specs = [read_model(path, TrialSpec) for path in Path(files.round_specs("agg", 0)).glob("*.json")]
    assert specs
    assert set(warm_up_groups({s.key(): replay_call(s.replay) for s in specs})) <= _WARMED


def trace_config():
    return {"search_space": {"model_name": "Qwen/Qwen3-32B", "hardware_sku": "h200_sxm"}}


# -- who may use the host, and what one caller can do to the others (a host serving fake jobs) --

FAKE_HOST = Path(__file__).parent / "fake_host.py"


@pytest.fixture
def fake_host(monkeypatch, tmp_path):
    """A real host process serving the fake jobs of tests/fake_host.py; yields (process, socket name)."""
    name = f"spica-host-test-{os.getpid()}-{tmp_path.name}"
    monkeypatch.setenv(ADDRESS_VARIABLE, f"{name}@")
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    with open(tmp_path / "host.err", "w") as stderr:  # what the host says of its callers
        process = subprocess.Popen([sys.executable, str(FAKE_HOST), str(os.getpid())], stdin=subprocess.DEVNULL, stderr=stderr)
    deadline = time.time() + 30
    while time.time() < deadline and f"@{name}" not in Path("/proc/net/unix").read_text():
        time.sleep(0.05)
    yield psutil.Process(process.pid), name
    process.terminate()
    process.wait(timeout=30)


def fake_job(rule, tmp_path, **params):
    return JobArgs(
        rule=rule,
        input={},
        output={"out": str(tmp_path / f"{rule}.out")},
        params=params,
        wildcards={},
        log=[],
        threads=1,
        resources={},
    ).model_dump(mode="json")


# Run as another user with the system Python (no access to the venv needed): connect to the host,
# send a whole request for a job, and say whether the host closed the connection at once.
INTRUDER = textwrap.dedent(
    """
    import json, socket, struct, sys
    name, out = sys.argv[1], sys.argv[2]
    body = json.dumps({"job": "report_env", "cwd": "/", "env": {"PATH": "/intruder"},
                       "args": {"rule": "report_env", "input": {}, "output": {"out": out}, "params": {},
                                "wildcards": {}, "log": [], "threads": 1, "resources": {}}}).encode()
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    connection.connect("\\0" + name)
    connection.settimeout(10)
    try:
        socket.send_fds(connection, [struct.pack("!Q", len(body))], [1, 2])
        connection.sendall(body)
        reply = connection.recv(4096)
    except OSError as exc:
        reply = b""
    print("closed" if reply == b"" else "answered: " + reply.decode())
    """
)


@pytest.mark.skipif(os.getuid() != 0 or not Path("/usr/sbin/runuser").exists(), reason="needs root to act as a second uid (CI runs as root)")
def test_another_user_is_refused_at_once_and_no_job_runs_while_the_owners_jobs_still_run(fake_host, tmp_path):
    host, name = fake_host
    out = Path("/tmp") / f"spica-intruder-{os.getpid()}.out"
    out.unlink(missing_ok=True)
    intruder = subprocess.run(
        ["/usr/sbin/runuser", "-u", "nobody", "--", "/usr/bin/python3", "-c", INTRUDER, name, str(out)],
        capture_output=True, text=True, timeout=60, cwd="/",
    )
    assert intruder.stdout.strip() == "closed", intruder.stdout + intruder.stderr
    assert not out.exists() and host.children() == []
    assert "refused a connection from uid 65534" in (tmp_path / "host.err").read_text()
    assert delegate("report_env", fake_job("report_env", tmp_path)) == 0  # the owner's job runs
    assert (tmp_path / "report_env.out").exists()


def test_after_a_job_forks_the_host_runs_its_steps_ahead_in_order_in_itself(fake_host, tmp_path):
    host, _ = fake_host
    steps = tmp_path / "steps"
    assert delegate("with_steps_ahead", fake_job("with_steps_ahead", tmp_path, steps=str(steps))) == 0
    assert (tmp_path / "with_steps_ahead.out").exists()
    deadline = time.time() + 30
    while time.time() < deadline and len(steps.read_text().splitlines() if steps.exists() else []) < 2:
        time.sleep(0.05)
    assert steps.read_text().splitlines() == [f"first {host.pid}", f"second {host.pid}"]  # in the host, in order
    assert delegate("report_env", fake_job("report_env", tmp_path)) == 0  # and it serves on


def test_a_job_takes_from_its_caller_only_the_variables_a_job_reads(fake_host, tmp_path, monkeypatch):
    monkeypatch.setenv("LD_PRELOAD", "/caller/evil.so")
    monkeypatch.setenv("PATH", "/caller/bin:" + os.environ["PATH"])
    monkeypatch.setenv("SPICA_TRACE_SPLITS", str(tmp_path / "splits"))
    monkeypatch.chdir(tmp_path)
    assert delegate("report_env", fake_job("report_env", tmp_path)) == 0
    seen = json.loads((tmp_path / "report_env.out").read_text())
    assert seen["cwd"] == str(tmp_path)
    assert seen["env"]["SPICA_TRACE_SPLITS"] == str(tmp_path / "splits")
    assert "LD_PRELOAD" not in seen["env"] and "/caller/bin" not in seen["env"]["PATH"]


def test_the_host_takes_its_callers_job_variables_for_its_own_prepare_step_and_no_others(fake_host, tmp_path, monkeypatch):
    # The Snakefile starts the host before it sets the run's variables (where its traces' scans are kept), so the
    # host, started without them, must find them for a prepare step that scans a trace.
    host, _ = fake_host
    monkeypatch.setenv("SPICA_TRACE_SCANS", str(tmp_path / "scans"))
    monkeypatch.setenv("LD_PRELOAD", "/caller/evil.so")
    prepared = tmp_path / "prepared.json"
    assert delegate("env_in_prepare", fake_job("env_in_prepare", tmp_path, prepared=str(prepared))) == 0
    seen = json.loads(prepared.read_text())
    assert seen["pid"] == host.pid  # run in the host itself, before the fork
    assert seen["env"]["SPICA_TRACE_SCANS"] == str(tmp_path / "scans") and "LD_PRELOAD" not in seen["env"]


def test_the_host_loads_vizier_as_it_starts_so_even_its_first_job_forks_with_it(fake_host, tmp_path):
    # Asked as soon as the host listens: the job still forks after the start step (registry.AT_START).
    assert delegate("report_env", fake_job("report_env", tmp_path)) == 0
    assert json.loads((tmp_path / "report_env.out").read_text())["vizier_loaded"] is True


def test_a_caller_that_sends_nothing_does_not_hold_up_the_next_one(fake_host, tmp_path):
    _, name = fake_host
    idle = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    idle.connect("\0" + name)  # and sends nothing
    idle.setblocking(False)
    try:
        assert delegate("report_env", fake_job("report_env", tmp_path)) == 0
        with pytest.raises(BlockingIOError):
            idle.recv(1)  # still open, still waiting: the job above ran while it was connected
    finally:
        idle.close()


def test_a_panicking_warm_up_fails_only_itself_and_the_job_still_runs(fake_host, tmp_path):
    host, _ = fake_host
    assert delegate("panicking_warm_up", fake_job("panicking_warm_up", tmp_path)) == 0
    assert (tmp_path / "panicking_warm_up.out").exists()
    assert host.is_running()
    assert delegate("report_env", fake_job("report_env", tmp_path)) == 0  # and the host serves on


def test_a_hanging_warm_up_retires_the_host_without_losing_a_job_in_flight(fake_host, tmp_path):
    host, _ = fake_host
    running = subprocess.Popen(
        [sys.executable, "-c", DELEGATE_SLEEP, json.dumps(fake_job("sleep", tmp_path, seconds=3))],
        stdout=subprocess.PIPE, text=True,
    )
    deadline = time.time() + 30
    while time.time() < deadline and not host.children():
        time.sleep(0.05)  # the sleep job is running in the host
    # The hung warm-up's job is handed back (None: its rule script runs it itself) ...
    assert delegate("hanging_warm_up", fake_job("hanging_warm_up", tmp_path)) is None
    assert not (tmp_path / "hanging_warm_up.out").exists()
    # ... the job in flight finishes in the host, and later jobs run in their own processes.
    assert running.communicate(timeout=60)[0].strip() == "0"
    assert (tmp_path / "sleep.out").read_text() == "slept"
    assert delegate("report_env", fake_job("report_env", tmp_path)) is None
    assert host.is_running()  # retired, not dead: it still kills what it started if its owner dies


DELEGATE_SLEEP = textwrap.dedent(
    """
    import json, sys
    from spica_lib.host.client import delegate
    print(delegate("sleep", json.loads(sys.argv[1])))
    """
)


def test_a_job_environment_keeps_only_what_jobs_read():
    kept = job_environment({"SPICA_X": "1", "SLURM_JOB_ID": "7", "DYN_LOG": "error", "JAX_PLATFORMS": "cpu",
                            "TMPDIR": "/t", "PATH": "/p", "LD_PRELOAD": "x.so", "PYTHONPATH": "/q"})
    assert kept == {"SPICA_X": "1", "SLURM_JOB_ID": "7", "DYN_LOG": "error", "JAX_PLATFORMS": "cpu", "TMPDIR": "/t"}
