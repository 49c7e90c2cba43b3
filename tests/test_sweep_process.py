"""Telling a running sweep from a stopped one, and clearing what a killed one left half-written."""

import os
import subprocess
import sys
import time

import psutil

from spica_lib.base.artifacts import read_model, write_model
from spica_lib.run.layout import RunFiles
from spica_lib.run.sweep_process import (
    SweepProcess,
    clear_mark,
    clear_stale_temporaries,
    mark_running,
    sweep_state,
)


def test_a_sweep_is_running_while_its_recorded_snakemake_lives_and_stopped_once_it_is_gone(tmp_path):
    manifest = tmp_path / "manifest.json"
    assert sweep_state(tmp_path / "nothing", manifest) == "not started"
    assert sweep_state(tmp_path, manifest) == "stopped"  # a folder, no record, no manifest: it ended unfinished
    mark_running(tmp_path)  # this test's process stands in for Snakemake
    assert sweep_state(tmp_path, manifest) == "running"
    record = read_model(RunFiles(dir=str(tmp_path)).sweep_process_json, SweepProcess)
    killed = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    killed.kill()
    time.sleep(0.5)  # a zombie now: killed, not yet reaped (as a killed Snakemake whose parent died too)
    started = psutil.Process(killed.pid).create_time()
    write_model(RunFiles(dir=str(tmp_path)).sweep_process_json, record.model_copy(update={"pid": killed.pid, "process_started": started}))
    assert sweep_state(tmp_path, manifest) == "stopped"
    killed.wait()
    assert sweep_state(tmp_path, manifest) == "stopped"  # and once it is gone
    # A pid the kernel gave to another process since: its start time differs.
    write_model(RunFiles(dir=str(tmp_path)).sweep_process_json, record.model_copy(update={"process_started": record.process_started - 3600}))
    assert sweep_state(tmp_path, manifest) == "stopped"
    write_model(RunFiles(dir=str(tmp_path)).sweep_process_json, record.model_copy(update={"host": "another-node"}))
    assert sweep_state(tmp_path, manifest) == "running elsewhere"
    clear_mark(tmp_path)
    manifest.write_text("{}")
    assert sweep_state(tmp_path, manifest) == "finished"


def test_a_resumed_sweep_clears_only_the_temporaries_written_before_it_started(tmp_path):
    old, new, artifact = tmp_path / "a" / ".x.json.1.tmp", tmp_path / ".y.json.2.tmp", tmp_path / "z.json"
    old.parent.mkdir()
    started = time.time()
    for path in (old, new, artifact):
        path.write_text("{")
    os.utime(old, (started - 10, started - 10))
    os.utime(artifact, (started - 10, started - 10))
    os.utime(new, (started + 1, started + 1))
    assert clear_stale_temporaries(tmp_path, started) == [old]
    assert new.exists() and artifact.exists()  # one being written now (a straggling job), and a real artifact
