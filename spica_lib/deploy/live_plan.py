"""The steps that start a deployment outside Kubernetes, from one source: the sbatch script and both rehearsals.

A deployment is a list of steps: its frontend, then one step per worker. Every way of starting it reads that one
list, so none can drift from another:

- `deploy/<rank>/slurm/deploy.sbatch` renders it as `srun` steps (deploy/slurm_script.py);
- `spica rehearse --where slurm` renders the very same list through the very same function, with each worker's
  engine command swapped for a mocker's and nothing else (`rehearsal_steps`): the same exports, ports, `srun`
  options, readiness and teardown, so a defect in any of them fails the rehearsal;
- `spica rehearse --where local` starts the same list as processes on this machine (rehearsal/processes.py).

What a step gets:

- the frontend runs the DynamoGraphDeployment's own frontend command (`k8s_deploy.yaml`, as written: its router
  mode and KV-router settings); a real worker runs its DGD component's own script (the engine flags the generator
  wrote from the replayed settings) with its container's `env` (e.g. `NCCL_CUMEM_ENABLE=1`); a rehearsal's worker
  runs Dynamo's mocker with the replay's own engine arguments (`replayed.json`: the perf model, system, backend
  version, shape, role and limits the replay timed), its speed-up ratios multiplied by the rehearsal's;
- every step is told the discovery and the planes by environment (`STEP_ENV`: file discovery, the TCP request
  plane, the ZMQ event plane; no etcd, no NATS), never on its command line, so a worker that would not see them
  does not register and the readiness check names it;
- each worker gets its own free ports (`port_env`): Dynamo's system server and its request-plane server (whose
  port names the worker in the frontend's `/health`, so readiness counts workers, not endpoints), plus what its
  engine opens beside them (vLLM's NIXL side channel and KV events; Dynamo picks SGLang's bootstrap port itself).

A step's argv may hold `{placeholder}` words (`PLACEHOLDERS`) that each renderer fills: a port, a folder.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from spica_lib.deploy.dgd import components_by_role, main_container
from spica_lib.replay.plan import DeploymentPlan

# What every step is told, by environment: the discovery backend and the planes (DYN_FILE_KV, the discovery folder,
# is set by each renderer: a folder beside the script, or the rehearsal's own).
STEP_ENV = {"DYN_DISCOVERY_BACKEND": "file", "DYN_REQUEST_PLANE": "tcp", "DYN_EVENT_PLANE": "zmq"}
ROLES = ("agg", "prefill", "decode")
# The Dynamo component each role's workers register under (what /health lists them by).
COMPONENT = {"agg": "backend", "decode": "backend", "prefill": "prefill"}
RPC_PORT = "DYN_TCP_RPC_PORT"  # the worker's request-plane server: its address in /health names the worker
# Ports every worker opens, and those its engine opens beside them (each gets a free one, per worker).
WORKER_PORTS = ("DYN_SYSTEM_PORT", RPC_PORT)
ENGINE_PORTS = {"vllm": ("VLLM_NIXL_SIDE_CHANNEL_PORT", "DYN_VLLM_KV_EVENT_PORT"), "sglang": (), "trtllm": ()}
# Words of a step's argv each renderer fills: the frontend's HTTP port, the rehearsal's model folder (a tokenizer),
# a mocker's engine-argument file and a prefill mocker's bootstrap port (a spare free port every worker is given).
PLACEHOLDERS = ("{http_port}", "{model_dir}", "{engine_args}", "{bootstrap_port}")


class LiveProcess(BaseModel):
    """One step: the frontend, or one worker."""

    model_config = ConfigDict(extra="forbid")

    name: str
    role: Literal["frontend", "agg", "prefill", "decode"]
    argv: list[str]
    workers: int = 0  # the workers it registers (0: the frontend)
    gpus_per_worker: int = 0
    env: dict[str, str] = Field(default_factory=dict)  # the DGD container's own env (before STEP_ENV and the ports)
    port_env: list[str] = Field(default_factory=list)  # variables each given a free port of its own
    engine_args: dict[str, Any] | None = None  # a mocker's engine arguments, written to a JSON file it reads
    script: str | None = None  # a real worker's bash script, as the DGD runs it

    @property
    def component(self) -> str | None:
        return COMPONENT.get(self.role)


def frontend_args(dgd: dict[str, Any]) -> list[str]:
    """The DGD frontend's flags, without its HTTP port (each start picks its own)."""
    main = main_container(components_by_role(dgd)["frontend"])
    words = [*(main.get("command") or []), *(main.get("args") or [])]
    flags = words[words.index("dynamo.frontend") + 1 :] if "dynamo.frontend" in words else []
    out, skip = [], False
    for word in flags:
        if skip:
            skip = False
            continue
        if word == "--http-port":
            skip = True
            continue
        if not word.startswith("--http-port="):
            out.append(word)
    return out


def frontend_process(dgd: dict[str, Any]) -> LiveProcess:
    argv = ["python3", "-m", "dynamo.frontend", "--http-port", "{http_port}", *frontend_args(dgd)]
    main = main_container(components_by_role(dgd)["frontend"])
    return LiveProcess(name="frontend", role="frontend", argv=argv, env=container_env(main))


def role_workers(plan: DeploymentPlan) -> dict[str, tuple[dict[str, Any], int]]:
    """Each role's replayed engine arguments and worker count (the planner's starting counts)."""
    found = {
        "agg": (plan.agg_engine_args, plan.num_workers),
        "prefill": (plan.prefill_engine_args, plan.num_prefill_workers),
        "decode": (plan.decode_engine_args, plan.num_decode_workers),
    }
    return {role: (dict(args), int(count)) for role, (args, count) in found.items() if args is not None and count}


def mocker_engine_args(args: dict[str, Any], speedup: float) -> dict[str, Any]:
    """The replay's engine arguments for a live mocker, its steps `speedup` times as fast (a calibration's own
    ratio kept: the two multiply)."""
    out = dict(args)
    out["speedup_ratio"] = float(args.get("speedup_ratio", 1.0)) * speedup
    return out


def gpus_per_worker(args: dict[str, Any]) -> int:
    return int(args.get("aic_tp_size") or 1) * int(args.get("aic_attention_dp_size") or 1)


def container_env(main: dict[str, Any]) -> dict[str, str]:
    """A container's literal `env` (name -> value); a value taken from elsewhere (`valueFrom`) is refused, since a
    script cannot read a Kubernetes secret or field."""
    out = {}
    for item in main.get("env") or []:
        if "value" not in item:
            raise ValueError(f"the container env {item.get('name')!r} takes its value from Kubernetes (valueFrom), "
                             "which a SLURM step cannot read: give it a literal value in overrides.dgd")  # fmt: skip
        out[str(item["name"])] = str(item["value"])
    return out


def deployment_steps(plan: DeploymentPlan, dgd: dict[str, Any], backend: str) -> list[LiveProcess]:
    """The deployment's steps: its frontend, then each worker running its DGD component's own command."""
    components = components_by_role(dgd)
    steps = [frontend_process(dgd)]
    ports = [*WORKER_PORTS, *ENGINE_PORTS.get(backend, ())]
    for role, (args, count) in role_workers(plan).items():
        main = main_container(components[role])
        command, words = list(main.get("command") or []), list(main.get("args") or [])
        script = words[0] if command[-1:] == ["-c"] and words else " ".join([*command, *words])
        for index in range(count):
            steps.append(LiveProcess(name=f"{role}-{index}", role=role, argv=["bash", "-c", script], workers=1,
                                     gpus_per_worker=gpus_per_worker(args), env=container_env(main), port_env=ports,
                                     script=script))  # fmt: skip
    return steps


def rehearsal_steps(plan: DeploymentPlan, dgd: dict[str, Any], backend: str, model: str, speedup: float) -> list[LiveProcess]:
    """The deployment's steps with each worker's engine command swapped for Dynamo's mocker, timed as the replay
    was (its engine arguments), serving `model` by name with the tokenizer in `{model_dir}`: nothing else changes."""
    engines = role_workers(plan)
    out = []
    for step in deployment_steps(plan, dgd, backend):
        if step.role == "frontend":
            out.append(step)
            continue
        argv = ["python3", "-m", "dynamo.mocker", "--model-path", "{model_dir}", "--model-name", model,
                "--num-workers", "1", "--extra-engine-args", "{engine_args}"]  # fmt: skip
        if step.role != "agg":
            argv += ["--disaggregation-mode", step.role]
        if step.role == "prefill":
            argv += ["--bootstrap-ports", "{bootstrap_port}"]
        engine_args = mocker_engine_args(engines[step.role][0], speedup)
        out.append(step.model_copy(update={"argv": argv, "engine_args": engine_args, "script": None}))
    return out

