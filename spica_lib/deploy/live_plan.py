"""What runs when a deployment is started outside Kubernetes: its frontend and its workers, from one source.

Both ways of starting it read the same two things the Kubernetes file was made from, so none of them can
drift from what was replayed:

- the frontend runs the DynamoGraphDeployment's own frontend command (`k8s_deploy.yaml`, as written: its
  router mode and KV-router settings), with the discovery and planes a cluster without etcd and NATS uses;
- a real worker runs its DGD component's own script (the engine flags the generator wrote from the
  replayed settings); a rehearsal's worker runs Dynamo's mocker with the replay's own engine arguments
  (`replayed.json`: the perf model, system, backend version, shape, role and limits the replay timed),
  its speed-up ratios multiplied by the rehearsal's.

Every process uses file discovery (`DYN_FILE_KV`), the TCP request plane and the ZMQ event plane: no etcd,
no NATS. A mocker publishes its KV events on the event plane when prefix caching is on, which is what the KV
router listens to.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from spica_lib.deploy.dgd import components_by_role, main_container
from spica_lib.replay.plan import DeploymentPlan

PLANES = ["--discovery-backend", "file", "--request-plane", "tcp", "--event-plane", "zmq"]
ROLES = ("agg", "prefill", "decode")
# The Dynamo component each role's workers register under (what /health lists them by).
COMPONENT = {"agg": "backend", "decode": "backend", "prefill": "prefill"}


class LiveProcess(BaseModel):
    """One process to start: a frontend, or the workers of one role (a mocker runs several in one process)."""

    model_config = ConfigDict(extra="forbid")

    name: str
    role: Literal["frontend", "agg", "prefill", "decode"]
    argv: list[str]
    workers: int = 0  # the workers it registers (0: the frontend)
    gpus_per_worker: int = 0
    engine_args: dict[str, Any] | None = None  # a mocker's engine arguments, written to a JSON file it reads
    script: str | None = None  # a real worker's bash script, as the DGD runs it


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


def frontend_process(dgd: dict[str, Any], port: int | str) -> LiveProcess:
    argv = ["python3", "-m", "dynamo.frontend", "--http-port", str(port), *frontend_args(dgd), *PLANES]
    return LiveProcess(name="frontend", role="frontend", argv=argv)


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


def mocker_processes(
    plan: DeploymentPlan, model_dir: str, speedup: float, bootstrap_ports: list[int], one_per_worker: bool = False
) -> list[LiveProcess]:
    """The mocker processes of a rehearsal: one per role running its workers, or one per worker (a cluster's srun
    steps). Prefill workers each take a bootstrap port of `bootstrap_ports`, in order."""
    out = []
    ports = iter(bootstrap_ports)
    for role, (args, count) in role_workers(plan).items():
        groups = [1] * count if one_per_worker else [count]
        for index, workers in enumerate(groups):
            argv = ["python3", "-m", "dynamo.mocker", "--model-path", model_dir, "--num-workers", str(workers), *PLANES]
            if role != "agg":
                argv += ["--disaggregation-mode", role]
            if role == "prefill":
                argv += ["--bootstrap-ports", ",".join(str(next(ports)) for _ in range(workers))]
            name = f"{role}-{index}" if one_per_worker else role
            out.append(LiveProcess(name=name, role=role, argv=argv, workers=workers, gpus_per_worker=gpus_per_worker(args),
                                   engine_args=mocker_engine_args(args, speedup)))  # fmt: skip
    return out


def engine_processes(plan: DeploymentPlan, dgd: dict[str, Any]) -> list[LiveProcess]:
    """A real deployment's workers, one process each, running the DGD component's own command."""
    components = components_by_role(dgd)
    out = []
    for role, (args, count) in role_workers(plan).items():
        main = main_container(components[role])
        command, words = list(main.get("command") or []), list(main.get("args") or [])
        script = words[0] if command[-1:] == ["-c"] and words else " ".join([*command, *words])
        for index in range(count):
            out.append(LiveProcess(name=f"{role}-{index}", role=role, argv=["bash", "-c", script], workers=1,
                                   gpus_per_worker=gpus_per_worker(args), script=script))  # fmt: skip
    return out


def expected_registrations(processes: list[LiveProcess]) -> dict[str, int]:
    """Dynamo component -> how many worker instances must register under it."""
    counts: dict[str, int] = {}
    for process in processes:
        if process.role != "frontend":
            counts[COMPONENT[process.role]] = counts.get(COMPONENT[process.role], 0) + process.workers
    return counts
