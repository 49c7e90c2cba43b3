"""The replay worker: warm batches give the same results, and no replay outlives its worker.

The process-lifetime tests use a fake replay call (named `fake_*`) that sleeps or crashes: they
test our own control flow (forking, time limits, kills), not Dynamo. The batch test uses the real
replay.
"""

import contextlib
import faulthandler
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import psutil
import pytest
from conftest import WALL_CLOCK_METRICS, build, config_data

import spica_lib.replay.stall as stall_module
import spica_lib.replay.worker as worker_module
from spica_lib.facts.parallel import ParallelShape, ReplicaConfig
from spica_lib.replay.worker import ReplayWorker
from spica_lib.trial.evaluate import evaluate_trial, evaluate_trials, prepare_trial


def fake_sleep(call, per_request=None, on_checkpoint=None, on_stuck=None):
    time.sleep(60)


def fake_crash(call, per_request=None, on_checkpoint=None, on_stuck=None):
    faulthandler.disable()  # pytest's handler would print the crash of this deliberate segfault
    os.kill(os.getpid(), signal.SIGSEGV)


def fake_exit(call, per_request=None, on_checkpoint=None, on_stuck=None):
    os._exit(3)


def fake_echo(call, per_request=None, on_checkpoint=None, on_stuck=None):
    return {"metrics": {"x": float(call["x"])}, "scaling_events": [], "replay_seconds": 0.0}


def outcomes(calls, monkeypatch, fake, parallel=2, timeout=None):
    monkeypatch.setattr(worker_module, "execute_call", fake)
    with ReplayWorker(parallel=parallel, timeout=timeout) as worker:
        return {o.key: o for o in worker.run(calls)}


def test_children_report_back_and_crashes_are_failed_trials_with_their_cause(monkeypatch):
    done = outcomes({str(i): {"x": i} for i in range(5)}, monkeypatch, fake_echo)
    assert {k: o.report["outcome"]["metrics"]["x"] for k, o in done.items()} == {str(i): float(i) for i in range(5)}
    crashed = outcomes({"a": {}}, monkeypatch, fake_crash)["a"]
    assert crashed.status == "failed" and "killed by signal SIGSEGV" in crashed.reason
    exited = outcomes({"a": {}}, monkeypatch, fake_exit)["a"]
    assert exited.status == "failed" and "exit code 3" in exited.reason


def test_the_time_limit_kills_the_child_and_the_others_go_on(monkeypatch):
    monkeypatch.setattr(worker_module, "execute_call", fake_sleep)
    with ReplayWorker(parallel=2, timeout=0.5) as worker:
        started = time.perf_counter()
        done = list(worker.run({"a": {}, "b": {}, "c": {}}))
        assert time.perf_counter() - started < 10
        assert not worker.running
    assert sorted(o.key for o in done) == ["a", "b", "c"] and {o.status for o in done} == {"timed_out"}
    assert psutil.Process().children() == []


CHECKPOINT = {"prefix": "p", "completed": 7, "at_sim_ms": 900.0, "replay_seconds": 0.01, "cpu_seconds": 0.01}


def fake_prefix_then_sleep(call, per_request=None, on_checkpoint=None, on_stuck=None):
    on_checkpoint(CHECKPOINT)
    time.sleep(60)


def test_a_child_stopped_at_its_limit_still_reports_where_its_prefix_got(monkeypatch):
    stopped = outcomes({"a": {}}, monkeypatch, fake_prefix_then_sleep, timeout=1.0)["a"]
    assert stopped.status == "timed_out" and stopped.checkpoint == CHECKPOINT and stopped.report is None
    finished = outcomes({"a": {"x": 1}}, monkeypatch, fake_echo)["a"]
    assert finished.checkpoint is None and finished.report["ok"]


def busy(seconds):
    """Burn CPU (a stall is judged by the replay's CPU time, not by the wall clock)."""
    until = time.process_time() + seconds
    while time.process_time() < until:
        pass


def fake_quick_prefix_then_busy(call, per_request=None, on_checkpoint=None, on_stuck=None):
    on_checkpoint(CHECKPOINT)
    busy(60)


def fake_busy(call, per_request=None, on_checkpoint=None, on_stuck=None):
    busy(60)


RULES = {"requests": 100, "bounds": [["mean_ttft_ms", 2000.0]], "fraction": 0.5, "prefix_requests": 50,
         "prefix": "first half"}  # fmt: skip


def test_a_replay_that_stalls_is_stopped_at_its_prefix_pace_or_its_prefix_share_not_its_limit(monkeypatch):
    monkeypatch.setattr(stall_module, "STALL_FLOOR_SECONDS", 0.5)
    # The prefix took 0.01 CPU s for half the work: the full replay is stopped once it runs 10x past 0.02 s
    # (here the 0.5 s floor), long before its 30 s limit.
    stalled = outcomes({"a": {"stop": RULES}}, monkeypatch, fake_quick_prefix_then_busy, timeout=30)["a"]
    assert stalled.status == "timed_out" and stalled.reason.startswith("stalled: the full replay ran past 0 CPU s")
    assert stalled.checkpoint == CHECKPOINT and 0.5 <= stalled.cpu_seconds < 5
    # A prefix still running at its share of the limit (half of 4 s of CPU) is stopped there.
    slow_prefix = outcomes({"a": {"stop": RULES}}, monkeypatch, fake_busy, timeout=4)["a"]
    assert slow_prefix.status == "timed_out" and slow_prefix.checkpoint is None
    assert slow_prefix.reason.startswith("stalled: its prefix (first half) was not done within 2 CPU s")
    assert 2 <= slow_prefix.cpu_seconds < 3.5
    # A replay waiting for a core is not stalled: only its limit stops a sleeping one.
    waiting = outcomes({"a": {"stop": RULES}}, monkeypatch, fake_sleep, timeout=3)["a"]
    assert waiting.reason == "replay exceeded max_eval_seconds=3 and was stopped"
    assert psutil.Process().children() == []


WORKER_SCRIPT = """
import threading, time
import spica_lib.replay.worker as worker_module
from spica_lib.replay.worker import ReplayWorker

def fake_sleep(call, per_request=None, on_checkpoint=None, on_stuck=None):
    time.sleep(120)

worker_module.execute_call = fake_sleep
with ReplayWorker(parallel=2) as worker:
    threading.Thread(target=lambda: list(worker.run({"a": {}, "b": {}})), daemon=True).start()
    while len(worker.running) < 2:
        time.sleep(0.01)
    print(" ".join(str(pid) for pid in worker.running), flush=True)
    time.sleep(120)
"""


@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGTERM, signal.SIGINT])
def test_no_replay_outlives_its_worker(tmp_path, signum):
    worker = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(WORKER_SCRIPT)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "TMPDIR": str(tmp_path)},
        # A shell starts background jobs with SIGINT ignored, and Python then never turns it into
        # KeyboardInterrupt: give the worker the SIGINT an interactive Ctrl-C would bring.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    children = [int(pid) for pid in worker.stdout.readline().split()]
    assert len(children) == 2 and all(psutil.pid_exists(pid) for pid in children)
    worker.send_signal(signum)
    worker.wait(timeout=30)
    deadline = time.time() + 10
    while time.time() < deadline and any(_alive(pid) for pid in children):
        time.sleep(0.05)
    assert not any(_alive(pid) for pid in children)
    assert list(tmp_path.iterdir()) == []  # nothing written, so nothing left behind


def _alive(pid):
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.mark.slow
def test_a_warm_batch_gives_the_results_of_one_replay_at_a_time():
    config = build(config_data())

    def spec(tp, replicas, seqs=256):
        selection = {
            "deployment_mode": "agg",
            "backend": "vllm",
            "agg_max_num_batched_tokens": 8192,
            "agg_max_num_seqs": seqs,
            "router_mode": "round_robin",
            "planner_scaling_policy": "disabled",
        }
        layout = ReplicaConfig(shape=ParallelShape(tp=tp), replicas=replicas)
        return prepare_trial(config, selection, layout, backend_version="0.24.0")

    specs = {s.key(): s for s in (spec(1, 2), spec(2, 2), spec(4, 1, 512))}
    one_at_a_time = {key: evaluate_trial(s) for key, s in specs.items()}  # before anything is warm here
    warmed = []
    batch = dict(evaluate_trials(specs, parallel=2, warm=True, on_warm=warmed.append))
    assert len(warmed) == 1 and set(batch) == set(specs)
    for key, result in batch.items():
        alone = one_at_a_time[key]
        assert result.status == alone.status == "feasible" and result.score == alone.score
        same = {k: v for k, v in result.metrics.items() if k not in WALL_CLOCK_METRICS}
        assert same == {k: v for k, v in alone.metrics.items() if k not in WALL_CLOCK_METRICS}


def test_a_stop_signal_to_a_child_is_not_a_result(monkeypatch):
    # scancel and Ctrl-C signal every process of a job: the worker stops its children, and a child
    # must not die of that signal first and be recorded as a failed trial.
    monkeypatch.setattr(worker_module, "execute_call", fake_sleep)
    with ReplayWorker(parallel=1, timeout=1.0) as worker:

        def signal_the_child():
            while not worker.running:
                time.sleep(0.01)
            time.sleep(0.2)
            os.kill(next(iter(worker.running)), signal.SIGTERM)

        threading.Thread(target=signal_the_child, daemon=True).start()
        done = list(worker.run({"a": {}}))
    assert [o.status for o in done] == ["timed_out"]  # it ignored SIGTERM and ran to our limit


ARMED: list[bool] = []  # the at-fork hook below signals only while a test arms it (hooks cannot be removed)


def _signal_self_if_armed():
    if ARMED:
        ARMED.clear()
        os.kill(os.getpid(), signal.SIGTERM)


os.register_at_fork(before=_signal_self_if_armed)


def test_a_stop_signal_that_lands_while_a_child_is_forked_stops_the_worker_and_records_nothing(monkeypatch):
    # Seen on SLURM: a scancel landed during the fork of a replay; the handler's exception was swallowed in the
    # interpreter's at-fork hooks, the job went on, and the child, killed by the same signal before it ignored
    # it, was recorded (and journaled) as a failed replay.
    monkeypatch.setattr(worker_module, "execute_call", fake_echo)
    yielded, before = [], own_children()
    with pytest.raises(SystemExit) as stopped, ReplayWorker(parallel=1) as worker:
        ARMED.append(True)
        for outcome in worker.run({"a": {"x": 1}, "b": {"x": 2}}):
            yielded.append(outcome)
    assert stopped.value.code == 128 + signal.SIGTERM and yielded == [] and not ARMED
    assert worker.running == {} and own_children() <= before  # the child was killed, not left


def own_children():
    """This process's live children (another test's may still be here: only new ones count)."""
    live = set()
    for child in psutil.Process().children():
        with contextlib.suppress(psutil.NoSuchProcess):
            if child.status() != psutil.STATUS_ZOMBIE:
                live.add(child.pid)
    return live


def test_a_stop_signal_whose_exception_python_swallowed_still_stops_the_worker_at_its_next_outcome(monkeypatch):
    monkeypatch.setattr(worker_module, "execute_call", fake_echo)
    yielded, before = [], own_children()

    def swallowed(key):  # as in a __del__ or an at-fork hook: the handler ran, its exception went nowhere
        with contextlib.suppress(SystemExit):
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(1)  # the handler runs at the next bytecode

    with pytest.raises(SystemExit) as stopped, ReplayWorker(parallel=1) as worker:
        for outcome in worker.run({"a": {"x": 1}, "b": {"x": 2}}, on_start=swallowed):
            yielded.append(outcome)
    assert stopped.value.code == 128 + signal.SIGTERM and yielded == [] and own_children() <= before


@pytest.mark.slow
def test_a_replay_stuck_between_two_ticks_is_stopped_when_it_stops_beating(monkeypatch):
    # A simulator stuck between two ticks (seen: a disagg SGLang deployment whose decode queue ran deep gave no
    # tick for over 90 CPU s after ticks every 5 ms, its native loop holding the GIL) is stopped by the worker from
    # outside, not left to its limit. Stand-in for the stuck simulator: the replay's fifth tick does not return for
    # 30 CPU s (our control flow; the replay is real).
    from test_trial_replay import agg, config, spec_for

    import spica_lib.replay.progress as progress

    monkeypatch.setattr(worker_module, "STALL_FLOOR_SECONDS", 0.5)
    monkeypatch.setattr(stall_module, "STUCK_FLOOR_SECONDS", 0.5)
    on_tick = progress.ProgressWatch._on_tick

    def stuck_on_the_fifth(self, snapshot):
        if self.ticks == 4:
            started = time.process_time()
            while time.process_time() - started < 30:
                pass
        return on_tick(self, snapshot)

    monkeypatch.setattr(progress.ProgressWatch, "_on_tick", stuck_on_the_fifth)
    ((_, result),) = evaluate_trials({"t": spec_for(config(), agg(1, 1))}, max_eval_seconds=120)
    assert result.status == "timed_out" and result.reason.startswith("stalled: no tick for "), result.reason
    assert "stuck between two ticks" in result.reason and result.cpu_seconds < 10
    assert psutil.Process().children() == []
