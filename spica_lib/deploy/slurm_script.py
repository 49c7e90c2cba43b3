"""An `sbatch` script that starts a deployment on one SLURM node: frontend, router and workers, then its traffic.

The script is rendered from the deployment's steps (deploy/live_plan.py), so its engine flags are the Kubernetes
file's, and the rehearsal renders the same steps, with mocker commands, through this same function. What it does:

1. Takes one whole node (`--exclusive --mem=0`) with the workers' GPUs; each step then gets its share of the
   node's CPUs and memory (`--exact --cpus-per-task --mem`), a worker its own GPUs, every other step none. Both
   are asked with `--gpus-per-node`, which overrides the job's (a step inherits `SLURM_GPUS_PER_NODE`: with
   `--gpus=1` each worker would be handed every GPU of the job, and `--gres=none` is an invalid TRES request on
   SLURM 22.05). A node with fewer CPUs than steps (a test cluster) lets the steps share them (`--overlap`, which
   shares their GPUs too), and says so.
2. Exports to every step what the frontend uses: Dynamo's file discovery in a folder beside the script
   (`DYN_FILE_KV`), the TCP request plane and the ZMQ event plane (live_plan.STEP_ENV), and one model cache
   (`HF_HOME`: `$SPICA_MODEL_CACHE`, else `model-cache/` beside the script); `HF_TOKEN` comes from the shell that
   submits. Each worker also gets its DGD container's `env` and ports of its own, picked free on the node when the
   job starts, outside the kernel's ephemeral range.
3. Checks up front what would otherwise fail late: the traffic tool (AIPerf) in the engine environment, and the
   model, fetched once into the cache (not by every worker).
4. Starts each step in the engine's environment (a container image through Pyxis, or a Python environment's
   `bin/` first on PATH), its output in `logs-<job id>/<step>.log`.
5. Waits, with a deadline, for every worker's `generate` endpoint in the frontend's `/health` (each worker found
   by its request-plane port, so prefill and decode are counted apart and by worker); a step that exits, or a
   worker that never registers, ends the job naming it and showing its log. `logs-<job id>/ready.json` records
   the seconds from the job's start to serving.
6. Runs the traffic step, then takes every step down and removes the discovery folder (also on scancel or the
   time limit).

File discovery watches a folder with inotify and expires its keys by mtime, which misses other nodes' writes on a
network file system, so a deployment that needs more than one node is refused (with the reason), not written.
"""

from __future__ import annotations

import json
import re
import shlex

from pydantic import BaseModel, ConfigDict, field_validator, model_validator

from spica_lib.deploy.live_plan import RPC_PORT, STEP_ENV, LiveProcess

WAIT_SECONDS = {"engine": 3600, "mocker": 300}  # for every worker to register (a real engine loads its weights)
SLURM_TIME = re.compile(r"^(\d+-)?\d{1,3}(:\d{2}){0,2}$")
SAFE_WORD = re.compile(r"^[A-Za-z0-9_./:@+=,-]+$")
# How the script names each placeholder of a step's argv (deploy/live_plan.py PLACEHOLDERS).
SHELL_WORDS = {"{http_port}": "$PORT", "{model_dir}": "$HERE/model", "{bootstrap_port}": "$BOOTSTRAP"}


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


class TrafficStep(BaseModel):
    """What runs once the deployment serves, and what checks up front that it can (words may use $HEAD, $PORT,
    $HERE and $LOGS)."""

    model_config = ConfigDict(extra="forbid")

    argv: list[str]
    check: list[str]  # run in the engine's environment before any worker starts: it must exit 0
    check_fails: str  # what to do when it does not


def one_node(processes: list[LiveProcess], gpus_per_node: int) -> int:
    """The GPUs the deployment takes on its one node; refused, with the reason, when one node cannot hold it."""
    gpus = sum(p.gpus_per_worker for p in processes if p.role != "frontend")
    if gpus > gpus_per_node:
        raise ValueError(
            f"the deployment needs {gpus} GPUs and a node has {gpus_per_node} (search_space.gpus_per_node or the "
            "system's): a SLURM script for several nodes is not written, since Dynamo's file discovery (inotify on "
            "a folder, keys expired by mtime) misses other nodes' writes on a network file system; deploy it on "
            "Kubernetes (k8s_deploy.yaml), or rank a deployment that fits one node"
        )
    return gpus


def slurm_script(
    *,
    name: str,
    about: list[str],
    processes: list[LiveProcess],
    gpus_per_node: int,
    options: SlurmOptions,
    model: str,
    fetch: str | None,
    traffic: TrafficStep,
    engine: str,
) -> str:
    """The sbatch script (see the module docstring). `model` is the name the deployment serves; `fetch` the model
    to fetch into the cache first (None: the workers need none fetched). `engine` is "engine" (real workers) or
    "mocker" (a rehearsal): it sets only how long the workers may take to register."""
    gpus = one_node(processes, gpus_per_node)
    lines = ["#!/bin/bash", *[f"# {line}" for line in about], f"#SBATCH --job-name={name}", "#SBATCH --nodes=1",
             "#SBATCH --exclusive  # the node's CPUs for the deployment's steps, shared out below",
             "#SBATCH --mem=0  # and all of its memory", "#SBATCH --output=%x-%j.log"]  # fmt: skip
    if gpus:
        lines.append(f"#SBATCH --gpus-per-node={gpus}")
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
    lines += _preamble(options, engine, len(processes) + 1, model)
    lines += ["# Up front: what the traffic step needs is in the engine's environment.",
              f"if ! srun --nodes=1 --ntasks=1 \"${{ONE[@]}}\" --gpus-per-node=0 \"${{LAUNCH[@]}}\" {_words(traffic.check)} "
              "> \"$LOGS/check.log\" 2>&1; then",
              f"  echo {shlex.quote('spica: ' + traffic.check_fails)} >&2",
              "  echo \"spica: the check's log: $LOGS/check.log\" >&2",
              "  tail -n 20 \"$LOGS/check.log\" >&2 || true", "  exit 1", "fi", "", *_fetch(fetch)]  # fmt: skip
    for process in processes:
        lines += _step(process)
    lines += ["", "wait_until_serving", "",
              "echo \"spica: the deployment serves at http://$HEAD:$PORT; the traffic step starts\"",
              f"srun --nodes=1 --ntasks=1 \"${{ONE[@]}}\" --gpus-per-node=0 \"${{LAUNCH[@]}}\" {_words(traffic.argv)} "
              "> \"$LOGS/traffic.log\" 2>&1",
              "echo \"spica: the traffic step ended; logs in $LOGS\""]  # fmt: skip
    return "\n".join(lines) + "\n"


def _preamble(options: SlurmOptions, engine: str, steps: int, model: str) -> list[str]:
    launch = (
        f'--container-image={options.image} --container-mounts="$HERE:$HERE" --container-workdir="$HERE"'
        if options.image
        else f'env PATH={shlex.quote(options.python_env)}/bin:"$PATH"'
    )
    exports = " ".join(f"{key}={value}" for key, value in STEP_ENV.items())
    return [
        "# The script's own folder (sbatch runs a copy of it): where its logs, discovery folder and files are.",
        "SCRIPT=$(scontrol show job \"$SLURM_JOB_ID\" | sed -n 's/^ *Command=//p')",
        'case "$SCRIPT" in /*) ;; *) SCRIPT="$SLURM_SUBMIT_DIR/$SCRIPT" ;; esac',
        'HERE=$(cd "$(dirname "$SCRIPT")" && pwd)',
        'LOGS="$HERE/logs-$SLURM_JOB_ID"',
        'mkdir -p "$LOGS"',
        "HEAD=$(hostname)",
        f"MODEL={shlex.quote(model)}  # the name the deployment serves",
        "",
        "# What every step is told: the discovery and the planes the frontend uses, and one model cache.",
        f"export {exports}",
        'export DYN_FILE_KV="$HERE/discovery-$SLURM_JOB_ID"',
        'export HF_HOME="${SPICA_MODEL_CACHE:-$HERE/model-cache}"  # set SPICA_MODEL_CACHE to share one between jobs',
        'mkdir -p "$DYN_FILE_KV" "$HF_HOME"',
        f"LAUNCH=({launch})  # the engine's environment, before each step's command",
        "",
        "# Each step's share of the node: its CPUs and memory (a node with fewer CPUs than steps: shared).",
        f"STEPS={steps}",
        "CPUS=${SLURM_CPUS_ON_NODE:-1}",
        'if [ "$CPUS" -ge "$STEPS" ]; then',
        '  ONE=(--exact --cpus-per-task=$((CPUS / STEPS)) ${SLURM_MEM_PER_NODE:+--mem=$((SLURM_MEM_PER_NODE / STEPS))})',
        "else",
        '  echo "spica: the node has $CPUS CPUs for $STEPS steps: the steps share them, and their GPUs (--overlap)"',
        "  ONE=(--overlap)",
        "fi",
        "",
        "# Ports free on this node now, below the kernel's ephemeral range (where connections take theirs) and below",
        "# 32768 (Dynamo reads DYN_SYSTEM_PORT as a signed 16-bit number).",
        "read -r EPHEMERAL_LOW _ < /proc/sys/net/ipv4/ip_local_port_range",
        "CEILING=32768",
        'if [ "$EPHEMERAL_LOW" -gt 11000 ] && [ "$EPHEMERAL_LOW" -lt "$CEILING" ]; then CEILING=$EPHEMERAL_LOW; fi',
        "TAKEN=' '",
        "free_port() {  # free_port VAR: a port no one listens on and this script has not handed out",
        "  local port",
        "  while true; do",
        "    port=$((10000 + RANDOM % (CEILING - 10000)))",
        '    case "$TAKEN" in *" $port "*) continue ;; esac',
        '    if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then break; fi',
        "  done",
        '  TAKEN="$TAKEN$port "',
        '  printf -v "$1" %s "$port"',
        "}",
        "PORT=''",
        "free_port PORT  # the frontend's HTTP port",
        "",
        "PIDS=() NAMES=() COMPONENTS=() RPCS=()",
        "cleanup() {",
        '  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done',
        "  wait 2>/dev/null || true",
        '  rm -rf "$DYN_FILE_KV"',
        "}",
        "trap cleanup EXIT",
        "trap 'exit 143' TERM INT  # scancel, or the time limit: the EXIT trap takes every step down",
        "",
        "start_step() {  # start_step NAME COMPONENT GPUS RPC_PORT COMMAND...: an srun step in the background",
        "  local name=$1 component=$2 gpus=$3 rpc=$4",
        "  shift 4",
        '  srun --nodes=1 --ntasks=1 "${ONE[@]}" --gpus-per-node="$gpus" "${LAUNCH[@]}" "$@" > "$LOGS/$name.log" 2>&1 &',
        '  PIDS+=($!) NAMES+=("$name") COMPONENTS+=("$component") RPCS+=("$rpc")',
        "}",
        "",
        "wait_until_serving() {  # until every worker's generate endpoint is in /health and the model is served",
        f"  local deadline=$((SECONDS + {WAIT_SECONDS[engine]})) health missing i",
        "  while true; do",
        '    for i in "${!PIDS[@]}"; do',
        '      if ! kill -0 "${PIDS[$i]}" 2>/dev/null; then',
        '        echo "spica: ${NAMES[$i]} exited before the deployment served; its log: $LOGS/${NAMES[$i]}.log" >&2',
        '        tail -n 20 "$LOGS/${NAMES[$i]}.log" >&2 || true',
        "        exit 1",
        "      fi",
        "    done",
        '    health=$(curl -sf "http://127.0.0.1:$PORT/health" || true) missing=()',
        '    for i in "${!NAMES[@]}"; do  # a worker is its request-plane port in the generate endpoint\'s address',
        '      [ -z "${RPCS[$i]}" ] && continue',
        '      grep -Eq "\\"tcp\\": *\\"[^\\"]*:${RPCS[$i]}/[^\\"]*generate\\"" <<<"$health" || missing+=("$i")',
        "    done",
        '    if [ "${#missing[@]}" = 0 ] && curl -sf "http://127.0.0.1:$PORT/v1/models" | grep -qF "\\"$MODEL\\""; then',
        '      echo "spica: every worker registered, $SECONDS s after the job started"',
        '      printf \'{"ready_seconds": %s, "workers": %s}\\n\' "$SECONDS" "$(( ${#NAMES[@]} - 1 ))" > "$LOGS/ready.json"',
        "      return",
        "    fi",
        '    if [ "$SECONDS" -ge "$deadline" ]; then',
        '      for i in "${missing[@]}"; do',
        '        echo "spica: ${NAMES[$i]} (${COMPONENTS[$i]}) never registered with the frontend; its log: '
        '$LOGS/${NAMES[$i]}.log" >&2',
        '        tail -n 20 "$LOGS/${NAMES[$i]}.log" >&2 || true',
        "      done",
        '      [ "${#missing[@]}" = 0 ] && echo "spica: every worker registered, but the frontend never listed $MODEL" >&2',
        "      exit 1",
        "    fi",
        "    sleep 2",
        "  done",
        "}",
        "",
    ]


def _fetch(fetch: str | None) -> list[str]:
    """The model, fetched once into the shared cache before the workers start (they then find it there)."""
    if not fetch:
        return []
    return [
        "# The model, fetched once into the shared cache (the workers then find it there).",
        f"if ! srun --nodes=1 --ntasks=1 \"${{ONE[@]}}\" --gpus-per-node=0 \"${{LAUNCH[@]}}\" python3 -c "
        f"{shlex.quote(f'from huggingface_hub import snapshot_download; snapshot_download({json.dumps(fetch)})')} "
        "> \"$LOGS/fetch.log\" 2>&1; then",
        f"  echo \"spica: could not fetch {fetch} into $HF_HOME (a gated model needs HF_TOKEN exported before sbatch); "
        "its log: $LOGS/fetch.log\" >&2",
        "  tail -n 20 \"$LOGS/fetch.log\" >&2 || true", "  exit 1", "fi", "",
    ]  # fmt: skip


def _step(process: LiveProcess) -> list[str]:
    argv = [SHELL_WORDS.get(word, word) for word in process.argv]
    argv = [f"$HERE/{process.name}.engine.json" if word == "{engine_args}" else word for word in argv]
    lines = [f"# {process.name}: {process.workers or 'no'} worker(s), {process.gpus_per_worker} GPU(s) each"]
    ports = [name for name in process.port_env]
    for variable in ports:
        lines.append(f"free_port {variable}")
    if process.role != "frontend":
        lines.append("free_port BOOTSTRAP  # a spare port of the worker's own (a prefill mocker's bootstrap)")
    env = [*(f"{k}={v}" for k, v in process.env.items()), *(f"{p}=${p}" for p in ports)]
    if process.script:
        lines.append("# shellcheck disable=SC2016  # the worker's script runs as written: its $ are its own")
    rpc = f"${RPC_PORT}" if RPC_PORT in ports else ""
    prefix = ["env", *env] if env else []
    lines.append(f"start_step {process.name} {process.component or 'frontend'} {process.gpus_per_worker} \"{rpc}\" "
                 f"{_words([*prefix, *argv])}")  # fmt: skip
    return lines


def _words(argv: list[str]) -> str:
    """argv as shell words: plain words quoted, words holding $HEAD / $PORT / $HERE / $VAR double-quoted."""
    return " ".join(f'"{w}"' if "$" in w and "'" not in w and '"' not in w else shlex.quote(w) for w in argv)
