"""`deploy/<rank>/slurm/`: the deployment as an sbatch script for a SLURM cluster, beside its Kubernetes files.

`deploy.sbatch` starts the DGD's own frontend and worker commands (deploy/live_plan.py) as `srun` steps on one
node (deploy/slurm_script.py), then runs AIPerf against it with the traffic the trial was replayed on (the same
argv as the Kubernetes benchmark Job, deploy/bench_job.py; a trace is copied beside the script). `README.md`
says how to submit it, what it needs and what it checks.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from spica_lib.base.artifacts import atomic_write_text
from spica_lib.deploy.bench_job import AIPERF, aiperf_argv
from spica_lib.deploy.live_plan import deployment_steps
from spica_lib.deploy.slurm_script import SlurmOptions, TrafficStep, one_node, slurm_script
from spica_lib.replay.plan import role_sku
from spica_lib.trial.describe import describe
from spica_lib.trial.spec import TrialRecord

SCRIPT = "deploy.sbatch"


def write_slurm_files(
    folder: Path, record: TrialRecord, dgd: dict[str, Any], *, name: str, rank: int, run: str, dynamo: str,
    options: SlurmOptions, gpus_per_node: int,
) -> list[str]:  # fmt: skip
    """Write `folder/deploy.sbatch` and `folder/README.md`; return the files written (names in `folder`).
    `gpus_per_node`: the node the files are written for (deploy.json's, search_space.node_gpus)."""
    plan = record.spec.replay.plan
    skus = {role_sku(record.spec.sample, role) for role in ("agg", "prefill", "decode") if _has(plan, role)}
    if len(skus) > 1:
        raise ValueError(f"its roles run on {sorted(skus)}, which one node does not hold: a SLURM script for several "
                         "nodes is not written (Dynamo's file discovery cannot span them)")  # fmt: skip
    steps = deployment_steps(plan, dgd, str(record.spec.sample.get("backend")))
    one_node(steps, gpus_per_node)  # refused before any file is written: said in deploy.json's slurm_error
    folder.mkdir(parents=True, exist_ok=True)
    request = record.spec.replay
    model = record.spec.sample["model_name"]
    written = [SCRIPT, "README.md"]
    if request.workload.trace_path:
        shutil.copyfile(request.workload.trace_path, folder / Path(request.workload.trace_path).name)
        written.append(Path(request.workload.trace_path).name)
    traffic = TrafficStep(
        argv=[*aiperf_argv(request, model, "http://$HEAD:$PORT", trace_dir="$HERE"), "--artifact-dir", "$LOGS/aiperf"],
        check=["aiperf", "--version"],
        check_fails=f"AIPerf is not in the engine environment: install it there (pip install aiperf=={AIPERF}) and "
        "submit again",
    )
    about = [f"Rank {rank} of run {run}: {describe(record.spec)}", f"Trial {record.key}; ai-dynamo {dynamo}.",
             f"Submit: sbatch {SCRIPT} (from any folder every node sees; README.md)."]  # fmt: skip
    script = slurm_script(name=name, about=about, processes=steps, gpus_per_node=gpus_per_node, options=options,
                          model=model, fetch=model, traffic=traffic, engine="engine")  # fmt: skip
    atomic_write_text(folder / SCRIPT, script)
    (folder / SCRIPT).chmod(0o755)
    atomic_write_text(folder / "README.md", _readme(options, skus, gpus_per_node, steps, dynamo, model))
    return written


def _has(plan: Any, role: str) -> bool:
    return getattr(plan, f"{role}_engine_args") is not None


def _readme(options: SlurmOptions, skus: set[str], gpus_per_node: int, steps: list, dynamo: str, model: str) -> str:
    environment = (
        f"the container image `{options.image}` through Pyxis" if options.image
        else f"the Python environment `{options.python_env}`" if options.python_env
        else "**none yet**: the script refuses to run until it is written with one (below)"
    )  # fmt: skip
    workers = [p for p in steps if p.role != "frontend"]
    gpus = sum(p.gpus_per_worker for p in workers)
    env = sorted({f"`{k}={v}`" for p in workers for k, v in p.env.items()})
    lines = [
        "# The deployment on SLURM", "",
        "```bash",
        "export HF_TOKEN=...   # for a gated model: the steps take it from the shell that submits",
        f"sbatch {SCRIPT}      # from a folder the node sees; output: <job name>-<job id>.log",
        "```", "",
        "Options are given when the files are written, never edited into the script:", "",
        "```bash",
        "spica report RUN --slurm-python-env /path/to/venv   # or --slurm-image <a Dynamo container image>",
        "                 [--slurm-account A] [--slurm-partition P] [--slurm-time 02:00:00]",
        "```", "",
        "## What it needs", "",
        f"- **The engine environment**: {environment}. It needs ai-dynamo {dynamo} with the workers' engine, and "
        f"AIPerf {AIPERF} for the traffic step (`pip install aiperf=={AIPERF}`): the job checks AIPerf before it "
        "starts any worker and stops, saying so, when it is missing.",
        f"- **One node** of {', '.join(sorted(skus))} with {gpus} of its {gpus_per_node} GPUs (`--exclusive --mem=0`: "
        "the node's CPUs and memory are shared out between the steps). A deployment that needs more than one node "
        "is not written: Dynamo's file discovery cannot span nodes on a network file system.",
        f"- Account: {options.account or 'the cluster default'}; partition: {options.partition or 'the cluster default'}; "
        f"time limit: {options.time or 'the partition default'}.",
        "- **A folder the node sees**: the script's own, for its logs (`logs-<job id>/`), Dynamo's file discovery "
        "(`discovery-<job id>/`, removed at the end) and the model cache.",
        f"- **The model** `{model}`, fetched once into one cache before the workers start (`HF_HOME`: "
        "`$SPICA_MODEL_CACHE` when set, else `model-cache/` beside the script; set `SPICA_MODEL_CACHE` to a shared "
        "folder so every job reuses one download). A gated model needs `HF_TOKEN` exported before `sbatch` (the "
        "Kubernetes files read it from the `hf-token-secret` secret).",
        "",
        "## What it does and checks", "",
        f"- {len(workers)} worker(s), each an `srun` step with its GPUs and its share of the node's CPUs and memory; "
        "the frontend and the traffic step ask for no GPU (`--gpus-per-node=0`). They run the Kubernetes file's own "
        "commands (`../k8s_deploy.yaml`): the same engine flags, from the replayed settings"
        + (f", with its container env ({', '.join(env)})" if env else "") + ".",
        "- Every step is told the discovery and the planes by environment: file discovery, the TCP request plane, the "
        "ZMQ event plane (no etcd, no NATS to start); each worker gets its own free ports, picked on the node when "
        "the job starts, outside the kernel's ephemeral range.",
        "- It waits for every worker's `generate` endpoint in the frontend's `/health` (each worker found by its own "
        "request-plane port), with a deadline; a worker that exits or never registers ends the job, named, with "
        "its log. `logs-<job id>/ready.json` holds the seconds from the job's start to serving.",
        "- Logs: `logs-<job id>/<step>.log` per step, `traffic.log` and `aiperf/` for the traffic step.",
        "",
        "`spica rehearse RUN --where slurm` submits this script with each worker's engine command swapped for "
        "Dynamo's mocker, and nothing else changed, before anyone spends a GPU on the engines.",
    ]  # fmt: skip
    return "\n".join(lines) + "\n"
