"""Start a deployment's processes on this machine, wait until it serves, and take it down again.

The steps are started as the sbatch script starts them (deploy/live_plan.py, deploy/slurm_script.py): the
discovery and the planes by environment, each worker's DGD env and free ports of its own. Every wait is bounded,
and every way a deployment fails to come up is a `RehearsalFailed` that names the process and its log: a process
that exits (a setting its engine refuses), a frontend that never answers `/health`, a worker that never registers
(each found in `/health` by its request-plane port).

No process outlives its owner: each child asks the kernel for SIGKILL when this process dies, and leads its
own process group, which `stop` signals. The folder the processes share (discovery, the model folder, their
HOME, where the frontend caches model cards) is removed by `stop`, or, when this process is killed outright,
by a keeper (`python -m spica_lib.rehearsal.folder_keeper`) that the kernel signals at its death.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from spica_lib.base.lifetime import die_with_parent, signal_group
from spica_lib.deploy.live_plan import RPC_PORT, STEP_ENV, LiveProcess

FRONTEND_WAIT_SECONDS = 60.0  # the frontend answers /health
REGISTER_WAIT_SECONDS = 120.0  # every worker registered (a mocker loads the perf DB and estimates its KV blocks)
STOP_GRACE_SECONDS = 5.0
POLL_SECONDS = 0.25
LOG_TAIL_LINES = 6


class RehearsalFailed(RuntimeError):
    """The deployment did not start, register, route or serve; the message names the process and its log."""


# Ports are picked as the sbatch script picks them: below the kernel's ephemeral range, where connections take
# theirs, and below 32768, since Dynamo reads DYN_SYSTEM_PORT as a signed 16-bit number.
PORT_FLOOR, PORT_CEILING = 10000, 32768


def free_ports(count: int) -> list[int]:
    """`count` TCP ports free on this machine now (held open together, so they differ), outside the ephemeral range."""
    low = _ephemeral_low()
    ceiling = min(low, PORT_CEILING) if low > PORT_FLOOR + 1000 else PORT_CEILING
    sockets: list[socket.socket] = []
    rng = random.Random()
    try:
        while len(sockets) < count:
            s = socket.socket()
            try:
                s.bind(("", rng.randrange(PORT_FLOOR, ceiling)))
            except OSError:
                s.close()
                continue
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return PORT_CEILING


class LiveDeployment:
    """The processes of one deployment on this machine (a context manager: leaving it stops them all)."""

    def __init__(self, log_dir: Path, port: int):
        self.processes: list[LiveProcess] = []
        self.log_dir = Path(log_dir)
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.folder = Path(tempfile.mkdtemp(prefix="spica-rehearsal-"))
        self.children: dict[str, subprocess.Popen] = {}
        self.rpc_ports: dict[str, str | None] = {}  # step -> its request-plane port (what /health names it by)
        self.keeper: subprocess.Popen | None = None
        self.started = time.perf_counter()

    @property
    def model_dir(self) -> Path:
        return self.folder / "model"

    def log(self, name: str) -> Path:
        return self.log_dir / f"{name}.log"

    def __enter__(self) -> LiveDeployment:
        parent = os.getpid()
        self.keeper = subprocess.Popen(
            [sys.executable, "-m", "spica_lib.rehearsal.folder_keeper", str(self.folder)],
            preexec_fn=lambda: die_with_parent(parent, signal.SIGTERM),
            stdin=subprocess.DEVNULL,
        )
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self, processes: list[LiveProcess]) -> None:
        """Start every step as the sbatch script does (deploy/slurm_script.py): the discovery and the planes by
        environment, each worker's DGD env and free ports of its own, a mocker's engine arguments in a file."""
        self.processes = processes
        self.log_dir.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ)
        # Everything they write goes in the shared folder, removed with it: discovery, the frontend's model-card
        # cache (under HOME) and their temporary files.
        env.update(STEP_ENV)
        env.update({"DYN_FILE_KV": str(self.folder / "discovery"), "HOME": str(self.folder / "home"),
                    "TMPDIR": str(self.folder / "tmp"), "DYN_LOG": os.environ.get("DYN_LOG", "info")})  # fmt: skip
        for name in ("discovery", "home", "tmp"):
            (self.folder / name).mkdir(exist_ok=True)
        # `python3` in a plan is this interpreter: the same Dynamo the replay used.
        bin_dir = str(Path(sys.executable).parent)
        env["PATH"] = bin_dir + os.pathsep + env.get("PATH", "")
        parent = os.getpid()
        self.started = time.perf_counter()
        for process in self.processes:
            own = dict(process.env)
            ports = free_ports(len(process.port_env) + 1)  # the last: the worker's spare (a prefill's bootstrap)
            own.update(zip(process.port_env, map(str, ports), strict=False))
            words = {"{http_port}": str(self.port), "{model_dir}": str(self.model_dir),
                     "{bootstrap_port}": str(ports[-1]), "{engine_args}": str(self.folder / f"{process.name}.engine.json")}  # fmt: skip
            argv = [sys.executable if word == "python3" else words.get(word, word) for word in process.argv]
            if process.engine_args is not None:
                Path(words["{engine_args}"]).write_text(json.dumps(process.engine_args), encoding="utf-8")
            self.rpc_ports[process.name] = own.get(RPC_PORT)
            with open(self.log(process.name), "wb") as log:
                self.children[process.name] = subprocess.Popen(
                    argv, cwd=self.folder, env={**env, **own}, stdout=log, stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL, process_group=0,
                    preexec_fn=lambda: die_with_parent(parent, signal.SIGKILL),
                )  # fmt: skip

    def wait_until_serving(self, model: str) -> float:
        """Wait for the frontend's health, then for every worker's registration; the seconds it took."""
        deadline = time.perf_counter() + FRONTEND_WAIT_SECONDS
        health = None
        while health is None:
            self._check_alive()
            health = self._health()
            if health is None and time.perf_counter() > deadline:
                raise RehearsalFailed(
                    f"the frontend never answered {self.url}/health within {FRONTEND_WAIT_SECONDS:g} s; "
                    f"its log {self.log('frontend')}:\n{self._tail('frontend')}"
                )
            time.sleep(POLL_SECONDS)
        deadline = time.perf_counter() + REGISTER_WAIT_SECONDS
        while True:
            self._check_alive()
            missing = self.unregistered(self._health() or {})
            if not missing and self._serves(model):
                return time.perf_counter() - self.started
            if time.perf_counter() > deadline:
                logs = "\n".join(f"{name} ({self.log(name)}):\n{self._tail(name)}" for name in missing)
                raise RehearsalFailed(
                    f"{', '.join(missing) or 'every worker registered, but the frontend never listed ' + model}: never "
                    f"registered with the frontend within {REGISTER_WAIT_SECONDS:g} s; their logs:\n{logs}"
                )
            time.sleep(POLL_SECONDS)

    def unregistered(self, health: dict) -> list[str]:
        """The workers whose generate endpoint is not in /health: each found by its request-plane port, so workers
        are counted, prefill and decode apart, not endpoints (an SGLang worker registers five)."""
        listening = _generate_ports(health)
        return [p.name for p in self.processes if p.role != "frontend" and self.rpc_ports.get(p.name) not in listening]

    def worker_components(self) -> dict[str, str]:
        """Registered worker instance id -> its component (backend or prefill), as /health lists them."""
        health = self._health() or {}
        return {str(i.get("instance_id")): str(i.get("component")) for i in health.get("instances", [])}

    def stop(self) -> None:
        for child in self.children.values():
            signal_group(child.pid, signal.SIGTERM)
        deadline = time.perf_counter() + STOP_GRACE_SECONDS
        for child in self.children.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.wait(timeout=max(0.0, deadline - time.perf_counter()))
            signal_group(child.pid, signal.SIGKILL)
            with contextlib.suppress(ChildProcessError):
                child.wait()
        self.children.clear()
        shutil.rmtree(self.folder, ignore_errors=True)
        if self.keeper is not None:
            self.keeper.terminate()
            self.keeper.wait()
            self.keeper = None

    def _check_alive(self) -> None:
        for name, child in self.children.items():
            code = child.poll()
            if code is not None:
                raise RehearsalFailed(
                    f"{name} exited with code {code} before the deployment served; its log {self.log(name)}:\n"
                    f"{self._tail(name)}"
                )

    def _health(self) -> dict | None:
        try:
            with urllib.request.urlopen(f"{self.url}/health", timeout=2) as response:
                return json.loads(response.read())
        except (OSError, ValueError):
            return None

    def _serves(self, model: str) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/v1/models", timeout=2) as response:
                return any(m.get("id") == model for m in json.loads(response.read()).get("data", []))
        except (OSError, ValueError):
            return False

    def _tail(self, name: str) -> str:
        try:
            lines = self.log(name).read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            return "  (no log)"
        return "\n".join("  " + line for line in lines[-LOG_TAIL_LINES:])


def _generate_ports(health: dict) -> set[str]:
    """The request-plane ports of the instances /health lists with a generate endpoint."""
    ports = set()
    for instance in health.get("instances", []):
        address = str((instance.get("transport") or {}).get("tcp") or "")
        if instance.get("endpoint") == "generate" and ":" in address:
            ports.add(address.split("/", 1)[0].rsplit(":", 1)[1])
    return ports
