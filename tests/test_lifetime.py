"""One helper makes every child of Spica die with its parent (base/lifetime.py)."""

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import spica_lib
from spica_lib.base.lifetime import die_with_parent


def test_only_the_helper_asks_the_kernel_for_a_parent_death_signal():
    callers = [p for p in Path(spica_lib.__file__).parent.rglob("*.py") if "prctl" in p.read_text()]
    assert [p.name for p in callers] == ["lifetime.py"]


def test_a_child_whose_parent_is_already_gone_exits_at_once():
    # The parent check after the request: a child forked by a parent that then died is init's, and must go.
    code = "import sys; from spica_lib.base.lifetime import die_with_parent; die_with_parent(1, 9); sys.exit(0)"
    done = subprocess.run([sys.executable, "-c", code], timeout=60)
    assert done.returncode == 1


def test_a_child_of_a_living_parent_carries_on_and_is_signalled_when_it_dies():
    read, write = os.pipe()
    middle = os.fork()
    if middle == 0:  # the parent-to-be: forks the child, reports its pid, then dies
        parent = os.getpid()
        child = os.fork()
        if child == 0:
            die_with_parent(parent, signal.SIGKILL)  # exits at once if the parent is already gone
            signal.pause()  # only the parent's death ends this
            os._exit(0)
        os.write(write, f"{child}\n".encode())
        os._exit(0)
    os.waitpid(middle, 0)
    child = int(os.read(read, 64).decode())
    for _ in range(200):  # the child, re-parented, is killed by the kernel; nothing waits on it but init
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            return
        if Path(f"/proc/{child}/stat").read_text().split(")")[1].split()[0] == "Z":
            return  # killed; a zombie until its new parent reaps it
        time.sleep(0.05)
    raise AssertionError(f"child {child} outlived its parent")


# A middle process starts the watched one (its stdout a pipe to the test), then exits: the watched process,
# orphaned, must find its stdout and stderr on /dev/null and its writes must not fail.
ORPHAN = """
import os, subprocess, sys, time
if sys.argv[1] == "middle":
    subprocess.Popen([sys.executable, "-c", sys.argv[2], "watched", sys.argv[2], sys.argv[3]])
    time.sleep(0.5)  # the watched process has started its watch
    sys.exit(0)
from spica_lib.base.lifetime import silence_when_orphaned
silence_when_orphaned()
while not os.path.exists(sys.argv[3] + ".go"):  # the test has closed the pipes
    time.sleep(0.05)
time.sleep(0.5)
print("still writing", flush=True)  # the pipe's reader is gone: this must not raise
with open(sys.argv[3], "w") as out:
    out.write(os.readlink("/proc/self/fd/1") + " " + os.readlink("/proc/self/fd/2"))
"""


def test_an_orphaned_process_writes_its_output_nowhere_instead_of_to_a_closed_pipe(tmp_path):
    report = tmp_path / "fds"
    middle = subprocess.Popen([sys.executable, "-c", ORPHAN, "middle", ORPHAN, str(report)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    middle.wait(timeout=60)
    middle.stdout.close()  # no reader left, as when `spica fleet` and its terminal are gone
    middle.stderr.close()
    (tmp_path / "fds.go").touch()
    deadline = time.monotonic() + 60
    while not report.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert report.exists(), "the orphan's write to its closed pipe failed"
    assert report.read_text() == "/dev/null /dev/null"


def test_snakemakes_sigterm_handler_does_not_wait_for_the_lock_its_own_thread_holds():
    """Snakemake's SIGTERM handler runs in its main thread, which holds the scheduler's lock while it finishes jobs;
    a handler that took that lock waited on itself for ever (a sweep left running, seen on a stack dump)."""
    from snakemake.scheduling.job_scheduler import JobScheduler

    from spica_lib.run.snakemake_main import stop_without_deadlock

    stop_without_deadlock()  # what `spica run`, `spica fleet` and the Python API do before Snakemake starts
    scheduler = JobScheduler.__new__(JobScheduler)  # only the fields the handler and the lock involve
    scheduler._lock, scheduler._open_jobs, scheduler._user_kill = threading.Lock(), threading.Semaphore(0), None
    handled = threading.Event()

    def finishing_jobs_when_the_signal_comes() -> None:
        with scheduler._lock:
            scheduler.exit_gracefully(signal.SIGTERM, None)
        handled.set()

    threading.Thread(target=finishing_jobs_when_the_signal_comes, daemon=True).start()
    assert handled.wait(5), "the handler waits for the lock its own thread holds"
    assert scheduler._user_kill == "graceful" and scheduler._open_jobs.acquire(timeout=0)  # the loop is woken


def test_spica_starts_every_snakemake_of_its_own_through_the_entry_that_frees_the_handler():
    from spica_lib.fleet.launch import fleet_snakemake_command
    from spica_lib.run.launcher import snakemake_command

    for command in (snakemake_command("c.yaml", 2, None, None, []), fleet_snakemake_command("f.yaml", 2, None, None, [])):
        assert command[1:3] == ["-m", "spica_lib.run.snakemake_main"]
