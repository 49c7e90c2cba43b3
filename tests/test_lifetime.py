"""One helper makes every child of Spica die with its parent (base/lifetime.py)."""

import os
import signal
import subprocess
import sys
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
