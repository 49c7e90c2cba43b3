"""The rule scripts' side of the warm host: hand the job to the host when there is one, else run it here.

Stdlib only until the job runs here: a delegated job's process costs a Python start and one
round trip over a Unix socket.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import struct
import sys
from typing import Any

# Set by the Snakemake process that started the host (see launch.py): "<abstract socket name>@<SLURM job id or empty>".
# The host reads its own name from it too, so the name is in no command line.
ADDRESS_VARIABLE = "SPICA_WARM_HOST"
OFF = "off"  # SPICA_WARM_HOST=off: every job runs in its own process (how a sweep ran before the host)
HEADER = struct.Struct("!Q")  # the request's length, sent with the job's stdout and stderr descriptors
STARTED = b"started\n"
# What a job reads from its environment, the only variables a job's child takes from the caller
# (it keeps the host's, its owner's, for the rest: no caller's PATH or LD_PRELOAD reaches it).
JOB_VARIABLE_PREFIXES = ("SPICA_", "SLURM_", "DYN_", "JAX_")
JOB_VARIABLES = ("TMPDIR",)
_PEER_CREDENTIALS = struct.Struct("3i")  # struct ucred: pid, uid, gid


def run_job_args(name: str, job: Any) -> None:
    """Run job `name` (a JobArgs, read from its rule's `snakemake` object) in the warm host, or here when there is none."""
    code = delegate(name, job.model_dump(mode="json"))
    if code is None:
        from spica_lib.host.registry import run_job_here

        run_job_here(name, job)
    elif code != 0:
        sys.exit(code)


def host_address() -> str | None:
    """The abstract socket of this process's warm host, or None when this job must run itself.

    A job that SLURM runs under another job id than the host's runs on the cores SLURM gave it,
    not in the host (which may not even be on its node).
    """
    value = os.environ.get(ADDRESS_VARIABLE, "")
    if not value or value == OFF:
        return None
    name, _, slurm_job = value.partition("@")
    return name if slurm_job == os.environ.get("SLURM_JOB_ID", "") else None


def delegate(name: str, job: dict[str, Any]) -> int | None:
    """The exit code of job `name` run by the warm host, or None when no host took it (nothing ran)."""
    address = host_address()
    if address is None:
        return None
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        connection.connect("\0" + address)
    except OSError:
        connection.close()
        return None  # the host is gone (it died with an error, or the sweep is ending)
    with connection:
        if peer_uid(connection) != os.getuid():
            print(f"spica: {address} is not this user's warm host; running the {name} job here", file=sys.stderr)
            return None
        request = {"job": name, "args": job, "cwd": os.getcwd(), "env": job_environment(dict(os.environ))}
        body = json.dumps(request).encode("utf-8")
        sys.stdout.flush()
        sys.stderr.flush()
        # The job's child writes to this process's stdout and stderr, wherever Snakemake sent them.
        try:
            socket.send_fds(connection, [HEADER.pack(len(body))], [1, 2])
            connection.sendall(body)
        except OSError:
            return None  # the host closed the connection before it forked the job (it is retiring)
        reply = _read_all(connection)
    if not reply.startswith(STARTED):
        return None  # the host ended before it forked the job: run it here
    answer = reply[len(STARTED) :].strip()
    if not answer:
        print(f"spica: the warm host ended while running this {name} job", file=sys.stderr)
        return 1
    return int(json.loads(answer)["exit"])


def peer_uid(connection: socket.socket) -> int:
    """The uid of the process at the other end of a connected Unix socket, as the kernel saw it connect."""
    credentials = connection.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _PEER_CREDENTIALS.size)
    return _PEER_CREDENTIALS.unpack(credentials)[1]


def job_environment(environment: dict[str, str]) -> dict[str, str]:
    """The variables of `environment` a job reads (see JOB_VARIABLES)."""
    return {
        name: value
        for name, value in environment.items()
        if name.startswith(JOB_VARIABLE_PREFIXES) or name in JOB_VARIABLES
    }


def _read_all(connection: socket.socket) -> bytes:
    chunks = []
    with contextlib.suppress(ConnectionResetError):  # the host died: what it sent before says how far it got
        while chunk := connection.recv(4096):
            chunks.append(chunk)
    return b"".join(chunks)
