"""The rule scripts' side of the warm host: hand the job to the host when there is one, else run it here.

Stdlib only until the job runs here: a delegated job's process costs a Python start and one
round trip over a Unix socket.
"""

from __future__ import annotations

import json
import os
import socket
import struct
import sys
from typing import Any

# Set by the Snakemake process that started the host (see launch.py): "<abstract socket name>@<SLURM job id or empty>".
ADDRESS_VARIABLE = "SPICA_WARM_HOST"
OFF = "off"  # SPICA_WARM_HOST=off: every job runs in its own process (how a sweep ran before the host)
HEADER = struct.Struct("!Q")  # the request's length, sent with the job's stdout and stderr descriptors
STARTED = b"started\n"


def run_job(name: str, smk: Any) -> None:
    """Run the rule script's job `name` (suggest, replay, tell) in the warm host, or here when there is none."""
    from spica_lib.run.job import JobArgs

    job = JobArgs.from_snakemake(smk)
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
        request = {"job": name, "args": job, "cwd": os.getcwd(), "env": dict(os.environ)}
        body = json.dumps(request).encode("utf-8")
        sys.stdout.flush()
        sys.stderr.flush()
        # The job's child writes to this process's stdout and stderr, wherever Snakemake sent them.
        socket.send_fds(connection, [HEADER.pack(len(body))], [1, 2])
        connection.sendall(body)
        reply = _read_all(connection)
    if not reply.startswith(STARTED):
        return None  # the host ended before it forked the job: run it here
    answer = reply[len(STARTED) :].strip()
    if not answer:
        print(f"spica: the warm host ended while running this {name} job", file=sys.stderr)
        return 1
    return int(json.loads(answer)["exit"])


def _read_all(connection: socket.socket) -> bytes:
    chunks = []
    while chunk := connection.recv(4096):
        chunks.append(chunk)
    return b"".join(chunks)
