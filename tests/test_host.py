"""The sweep's warm host: who may use it, what reaches the rule script, and that it never outlives its owner."""

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest
from conftest import TRACE, write_yaml

from spica_lib.base.artifacts import write_model
from spica_lib.config import trace
from spica_lib.config.validate import build_validated_config
from spica_lib.host import launch
from spica_lib.host.client import ADDRESS_VARIABLE, delegate, host_address
from spica_lib.host.registry import JOBS
from spica_lib.run.job import JobArgs


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
        update={"rule": "suggest", "input": {"config": str(tmp_path / "config.json")}}
    )
    trace._scan.cache_clear()
    JOBS["suggest"][1](job)  # what the host runs before it forks the job
    assert trace._scan.cache_info().currsize == 1
    trace.scan_trace(TRACE)  # as a forked suggest would: found, not read again
    assert trace._scan.cache_info().misses == 1


def trace_config():
    return {"search_space": {"model_name": "Qwen/Qwen3-32B", "hardware_sku": "h200_sxm"}}
