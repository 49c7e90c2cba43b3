"""An `sbatch` script that starts a deployment on a SLURM cluster: frontend, router and workers, then its traffic.

The script is written from a list of processes (deploy/live_plan.py: the DGD's own frontend command and worker
scripts, or the rehearsal's mockers), so its engine flags are the Kubernetes file's. What it does, in order:

1. Places the workers on the allocation's nodes, first fit by GPUs (GPUs per node: the system's, from
   aiconfigurator's system file), the frontend on the first node.
2. Uses Dynamo's file discovery in a folder beside the script (`DYN_FILE_KV`), the TCP request plane and the
   ZMQ event plane, so no etcd or NATS is started: a folder every node sees is the one thing it needs, and
   SLURM clusters share the folder jobs are submitted from (the script checks it from every node and stops
   with a clear error where it is not shared).
3. Starts each process as an `srun` step in the engine's environment: a container image through Pyxis
   (`--container-image`) or a Python environment (its `bin/` first on PATH), as given at report time. A
   step's output goes to `logs-<job id>/<process>.log`.
4. Waits for the frontend's `/health` to list every worker (bounded; a step that exits, or a worker that
   never registers, ends the job with the log to read), then runs its traffic step, then takes every step
   down and removes the discovery folder.

Ports come from the job id, so two jobs on one node do not collide. Options a cluster needs (account,
partition, time) are report-time options; the engine's environment is required, and a script written
without one refuses to run, naming the option.
"""

from __future__ import annotations

import re
import shlex

from pydantic import BaseModel, ConfigDict, field_validator, model_validator

from spica_lib.deploy.live_plan import COMPONENT, LiveProcess

WAIT_SECONDS = {"engine": 3600, "mocker": 180}  # for every worker to register (a real engine loads its weights)
SLURM_TIME = re.compile(r"^(\d+-)?\d{1,3}(:\d{2}){0,2}$")
SAFE_WORD = re.compile(r"^[A-Za-z0-9_./:@+=,-]+$")


class SlurmOptions(BaseModel):
    """What the cluster and the engine's environment need, given at report time (`spica report --slurm-*`)."""

    model_config = ConfigDict(extra="forbid")

    account: str | None = None
    partition: str | None = None
    time: str | None = None  # SLURM's --time: minutes, HH:MM:SS or D-HH:MM:SS
    image: str | None = None  # the Dynamo container image, started through Pyxis
    python_env: str | None = None  # a Python environment with ai-dynamo (and its engine) installed

    @field_validator("account", "partition", "image", "python_env")
    @classmethod
    def _one_word(cls, value: str | None) -> str | None:
        if value is not None and not SAFE_WORD.match(value):
            raise ValueError(f"{value!r} is not a plain word (letters, digits and ._/:@+=,- only)")
        return value

    @field_validator("time")
    @classmethod
    def _slurm_time(cls, value: str | None) -> str | None:
        if value is not None and not SLURM_TIME.match(value):
            raise ValueError(f"{value!r} is not a SLURM time limit: minutes, HH:MM:SS or D-HH:MM:SS")
        return value

    @model_validator(mode="after")
    def _one_environment(self) -> SlurmOptions:
        if self.image and self.python_env:
            raise ValueError("give the engine's environment once: an image (--slurm-image) or a Python environment "
                             "(--slurm-python-env), not both")  # fmt: skip
        return self


def place(processes: list[LiveProcess], gpus_per_node: int) -> list[int]:
    """The node index of each process: workers first fit by GPUs, largest first; the frontend on node 0."""
    order = sorted(range(len(processes)), key=lambda i: -processes[i].gpus_per_worker)
    free: list[int] = []
    node_of = [0] * len(processes)
    for i in order:
        need = processes[i].gpus_per_worker
        if processes[i].role == "frontend" or need == 0:
            continue
        if need > gpus_per_node:
            raise ValueError(
                f"{processes[i].name} needs {need} GPUs, more than one node's {gpus_per_node}: a worker spanning "
                "nodes is not written for SLURM"
            )
        node = next((n for n, left in enumerate(free) if left >= need), None)
        if node is None:
            free.append(gpus_per_node)
            node = len(free) - 1
        free[node] -= need
        node_of[i] = node
    return node_of


def slurm_script(
    *,
    name: str,
    about: list[str],
    processes: list[LiveProcess],
    gpus_per_node: int,
    options: SlurmOptions,
    traffic_step: list[str],
    engine: str,
) -> str:
    """The sbatch script (see the module docstring). `traffic_step` is the argv run once the deployment serves;
    words may use $HEAD, $PORT and $HERE. `engine` is "engine" (real workers, GPUs) or "mocker"."""
    node_of = place(processes, gpus_per_node)
    nodes = max(node_of, default=0) + 1
    uses_gpus = engine == "engine"
    steps_per_node = [sum(1 for n in node_of if n == node) for node in range(nodes)]
    lines = ["#!/bin/bash", *[f"# {line}" for line in about]]
    lines += [f"#SBATCH --job-name={name}", f"#SBATCH --nodes={nodes}",
              "#SBATCH --output=%x-%j.log"]  # fmt: skip
    if uses_gpus:  # a real worker's step takes its own task; mocker steps share one (--overlap)
        lines.append(f"#SBATCH --ntasks-per-node={max(steps_per_node) + 1}")
    if uses_gpus:
        lines.append(f"#SBATCH --gpus-per-node={max(_gpus_on(processes, node_of, n) for n in range(nodes))}")
    lines += [f"#SBATCH --{flag}={value}" for flag, value in (("account", options.account),
              ("partition", options.partition), ("time", options.time)) if value]  # fmt: skip
    lines += ["set -euo pipefail", ""]
    if not (options.image or options.python_env):
        lines += [
            "echo 'spica: this script was written without the engine environment: write it again with \"spica report "
            "RUN --slurm-image IMAGE\" (a Dynamo container, through Pyxis) or \"--slurm-python-env DIR\" (a Python "
            "environment with ai-dynamo installed).' >&2",
            "exit 2",
        ]  # fmt: skip
        return "\n".join(lines) + "\n"
    lines += _preamble(options, engine)
    expected = {}
    for process in processes:
        if process.role != "frontend":
            expected[COMPONENT[process.role]] = expected.get(COMPONENT[process.role], 0) + process.workers
    for index, process in enumerate(processes):
        lines += _step(process, node_of[index], uses_gpus, index)
    lines += ["", "wait_until_serving " + " ".join(f"{c}={n}" for c, n in sorted(expected.items())), "",
              "echo \"spica: the deployment serves at http://$HEAD:$PORT; the traffic step starts\"",
              f"srun --nodes=1 --ntasks=1 --nodelist=\"$HEAD\" --overlap \"${{LAUNCH[@]}}\" {_words(traffic_step)} "
              "> \"$LOGS/traffic.log\" 2>&1",
              "echo \"spica: the traffic step ended; logs in $LOGS\""]  # fmt: skip
    return "\n".join(lines) + "\n"


def _gpus_on(processes: list[LiveProcess], node_of: list[int], node: int) -> int:
    return sum(p.gpus_per_worker for p, n in zip(processes, node_of, strict=True) if n == node and p.role != "frontend")


def _preamble(options: SlurmOptions, engine: str) -> list[str]:
    launch = (
        f'--container-image={options.image} --container-mounts="$HERE:$HERE" --container-workdir="$HERE"'
        if options.image
        else f'env PATH={shlex.quote(options.python_env)}/bin:"$PATH"'
    )
    return [
        "# The script's own folder (sbatch runs a copy of it): where its logs, discovery folder and files are.",
        "SCRIPT=$(scontrol show job \"$SLURM_JOB_ID\" | sed -n 's/^ *Command=//p')",
        'case "$SCRIPT" in /*) ;; *) SCRIPT="$SLURM_SUBMIT_DIR/$SCRIPT" ;; esac',
        'HERE=$(cd "$(dirname "$SCRIPT")" && pwd)',
        'LOGS="$HERE/logs-$SLURM_JOB_ID"',
        'mkdir -p "$LOGS"',
        'mapfile -t NODES < <(scontrol show hostnames "$SLURM_JOB_NODELIST")',
        "HEAD=${NODES[0]}",
        "PORT=$((20000 + (SLURM_JOB_ID % 4000) * 10))  # from the job id: two jobs on a node do not collide",
        'export DYN_FILE_KV="$HERE/discovery-$SLURM_JOB_ID"  # Dynamo\'s file discovery: no etcd, no NATS',
        'mkdir -p "$DYN_FILE_KV"',
        f"LAUNCH=({launch})  # the engine's environment, before each step's command",
        "PIDS=() NAMES=()",
        "cleanup() {",
        '  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done',
        "  wait 2>/dev/null || true",
        '  rm -rf "$DYN_FILE_KV"',
        "}",
        "trap cleanup EXIT",
        "trap 'exit 143' TERM INT  # scancel, or the time limit: the EXIT trap takes every step down",
        "",
        "# Every node must see the discovery folder: it is how workers find the frontend.",
        'srun --nodes="$SLURM_JOB_NUM_NODES" --ntasks-per-node=1 --overlap test -d "$DYN_FILE_KV" || {',
        '  echo "spica: $DYN_FILE_KV is not visible from every node: submit from a folder all nodes share" >&2',
        "  exit 1",
        "}",
        "",
        "wait_until_serving() {  # component=count ...: until /health lists that many workers under each",
        f"  local deadline=$((SECONDS + {WAIT_SECONDS[engine]})) health ok want component count i",
        "  while true; do",
        '    for i in "${!PIDS[@]}"; do',
        '      if ! kill -0 "${PIDS[$i]}" 2>/dev/null; then',
        '        echo "spica: ${NAMES[$i]} exited before the deployment served; its log: $LOGS/${NAMES[$i]}.log" >&2',
        '        tail -n 20 "$LOGS/${NAMES[$i]}.log" >&2 || true',
        "        exit 1",
        "      fi",
        "    done",
        '    health=$(curl -sf "http://$HEAD:$PORT/health" || true) ok=1',
        '    for want in "$@"; do',
        "      component=${want%=*} count=${want#*=}",
        '      [ "$(grep -o "\\"component\\":\\"$component\\"" <<<"$health" | wc -l)" -ge "$count" ] || ok=0',
        "    done",
        '    if [ "$ok" = 1 ] && curl -sf "http://$HEAD:$PORT/v1/models" | grep -q \'"id"\'; then return; fi',
        '    if [ "$SECONDS" -ge "$deadline" ]; then',
        '      echo "spica: the workers did not all register with the frontend (want: $*); logs in $LOGS" >&2',
        "      exit 1",
        "    fi",
        "    sleep 2",
        "  done",
        "}",
        "",
    ]


def _step(process: LiveProcess, node: int, uses_gpus: bool, index: int) -> list[str]:
    gpus = f" --gpus={process.gpus_per_worker} --exact" if uses_gpus and process.gpus_per_worker else " --overlap"
    argv = list(process.argv)
    if process.engine_args is not None:
        argv += ["--extra-engine-args", f"$HERE/{process.name}.engine.json"]
    # Workers sharing a node get their own ports for what the engines open besides Dynamo's planes.
    ports = (f"DYN_SYSTEM_PORT=$((PORT + 1000 + {index})) VLLM_NIXL_SIDE_CHANNEL_PORT=$((PORT + 2000 + {index})) "
             f"DYN_VLLM_KV_EVENT_PORT=$((PORT + 3000 + {index})) ")  # fmt: skip
    env = "" if process.role == "frontend" else ports
    quoted = (
        ["# shellcheck disable=SC2016  # the worker's script runs as written: its $ are its own"]
        if process.script
        else []
    )
    return [
        f"# {process.name}: {process.workers or 'no'} worker(s), {process.gpus_per_worker} GPU(s) each, node {node}",
        *quoted,
        f'{env}srun --nodes=1 --ntasks=1 --nodelist="${{NODES[{node}]}}"{gpus} "${{LAUNCH[@]}}" '
        f'{_words(argv)} > "$LOGS/{process.name}.log" 2>&1 &',
        f"PIDS+=($!) NAMES+=({process.name})",
    ]


def _words(argv: list[str]) -> str:
    """argv as shell words: plain words quoted, words holding $HEAD / $PORT / $HERE / $((...)) double-quoted."""
    return " ".join(f'"{w}"' if "$" in w and "'" not in w and '"' not in w else shlex.quote(w) for w in argv)
