"""Deployment files for the top candidates: aiconfigurator's generator, checked against what was replayed.

For each of the top `sweep.top_k` deployments, `deploy/<rank>/` holds the generator's Dynamo
`DynamoGraphDeployment` YAML (`k8s_deploy.yaml`), its launch script (`run_0.sh`) and bench
files; `trial.json`, the exact trial (spec and result) behind the score; `replayed.json`, the
engine, router and planner configuration the replay ran; and `deploy.json`, which lists every
place the generated files differ from, or cannot express, the replayed deployment. The generator
is asked to keep our engine limits (`preserve_engine_limits`); whatever it still changes or
drops is found by reading the generated YAML back, never assumed.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict

from spica_lib.base.artifacts import atomic_write_text, write_model
from spica_lib.config import SmartSearchConfig
from spica_lib.config.fields import ROUTER_WEIGHTS
from spica_lib.facts.parallel import ReplicaConfig, role_configs
from spica_lib.replay.plan import role_sku
from spica_lib.report.view import RunView
from spica_lib.trial.describe import describe
from spica_lib.trial.spec import TrialRecord

SCHEMA_VERSION = 1
DGD_FILE = "k8s_deploy.yaml"
GPU_TYPE_LABEL = "spica.dev/gpu-sku"  # on each worker service: the GPU type its role was replayed on
ROUTER_FLAG = {"kv_router": "kv", "round_robin": "round-robin"}
# Where each backend's generated worker command carries a replayed setting: a `--flag value` pair, or a
# `key: value` line of TRT-LLM's engine YAML. None: the backend's template has no place for it.
SETTING_NAMES: dict[str, dict[str, str | None]] = {
    "vllm": {
        "tp": "--tensor-parallel-size",
        "max_num_seqs": "--max-num-seqs",
        "max_num_batched_tokens": "--max-num-batched-tokens",
        "block_size": "--block-size",
        "gpu_memory_utilization": "--gpu-memory-utilization",
    },
    "sglang": {
        "tp": "--tensor-parallel-size",
        "max_num_seqs": "--max-running-requests",
        "max_num_batched_tokens": None,
        "block_size": "--page-size",
        "gpu_memory_utilization": "--mem-fraction-static",
    },
    "trtllm": {
        "tp": "tensor_parallel_size:",
        "max_num_seqs": "max_batch_size:",
        "max_num_batched_tokens": "max_num_tokens:",
        "block_size": "tokens_per_block:",
        "gpu_memory_utilization": "free_gpu_memory_fraction:",
    },
}
ENGINE_SETTINGS = ("max_num_seqs", "max_num_batched_tokens", "block_size", "gpu_memory_utilization")
GENERIC_ENGINE_KEYS = {  # the generator's backend-neutral names for our per-role engine settings
    "max_num_batched_tokens": "max_num_tokens",
    "block_size": "tokens_per_block",
    "gpu_memory_utilization": "kv_cache_free_gpu_memory_fraction",
}


class DeploymentFiles(BaseModel):
    """Artifact `deploy/<rank>/deploy.json`: what was generated for one ranked deployment, and how it differs."""

    model_config = ConfigDict(extra="forbid")

    schema_version: int = SCHEMA_VERSION
    rank: int
    key: str
    deployment: str
    files: list[str]
    differences: list[str]  # the generated files change or cannot express these replayed settings
    error: str | None = None  # the generator failed: no deployment files, only trial.json and replayed.json


def write_top_deployments(view: RunView, deploy_dir: str | Path) -> list[DeploymentFiles]:
    """deploy/<rank>/ for each of the top `sweep.top_k` ranked deployments (the Pareto front's first, for a front)."""
    Path(deploy_dir).mkdir(parents=True, exist_ok=True)
    top = view.ranked[: view.config.sweep.top_k]
    return [
        write_deployment(Path(deploy_dir) / str(rank), rank, view.records[row.key], view.config)
        for rank, row in enumerate(top, start=1)
    ]


def write_deployment(folder: str | Path, rank: int, record: TrialRecord, config: SmartSearchConfig) -> DeploymentFiles:
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    write_model(folder / "trial.json", record)
    write_model(folder / "replayed.json", record.spec.replay.plan)
    summary = DeploymentFiles(rank=rank, key=record.key, deployment=describe(record.spec), files=[], differences=[])
    try:
        _generate(record, config, folder)
        dgd = yaml.safe_load((folder / DGD_FILE).read_text(encoding="utf-8"))
        summary.differences = differences(record, dgd)
    except Exception as exc:  # the files stay honest: say the generator failed rather than emit something else
        summary.error = f"aiconfigurator's generator failed: {type(exc).__name__}: {exc}"
    summary.files = sorted(p.name for p in folder.iterdir() if p.name != "deploy.json") + ["deploy.json"]
    write_model(folder / "deploy.json", summary)
    atomic_write_text(folder / "README.md", _readme(summary))
    return summary


def _generate(record: TrialRecord, config: SmartSearchConfig, folder: Path) -> None:
    from aiconfigurator.generator.api import generate_from_request
    from aiconfigurator.generator.request import (
        BackendSpec,
        EmitTargets,
        GeneratorRequest,
        ModelSpec,
        Overrides,
        Platform,
        SlaSpec,
        Topology,
    )

    spec, sample = record.spec, record.spec.sample
    mode = spec.deployment_mode
    roles = role_configs(spec.parallel_config)
    raw: dict[str, Any] = {"preserve_engine_limits": True, "DynConfig.router_mode": ROUTER_FLAG[sample["router_mode"]]}
    if any(r.shape.is_moe_layout for r in roles.values()):
        raw["ModelConfig.is_moe"] = True
    workload = config.workload
    request = GeneratorRequest(
        model=ModelSpec(model_path=sample["model_name"]),
        backend=BackendSpec(name=sample["backend"]),
        topology=Topology(
            mode=mode,
            roles={role: _sizing(sample, role, replica) for role, replica in roles.items()},
            workers={role: replica.replicas for role, replica in roles.items()},
        ),
        # Several GPU types: the generator takes one (the decode role's, as its --decode-system); each
        # role's worker is then pinned to its own type below.
        platform=Platform(hardware_profile=role_sku(sample, "agg" if mode == "agg" else "decode")),
        sla=SlaSpec(isl=workload.isl, osl=workload.osl),
        emit=EmitTargets(output_dir=str(folder)),
        overrides=Overrides(raw=raw),
    )
    problems = request.validate()
    if problems:
        raise ValueError("; ".join(map(str, problems)))
    logging.getLogger("aiconfigurator").setLevel(logging.ERROR)
    generate_from_request(request)
    if not (folder / DGD_FILE).is_file():
        raise FileNotFoundError(f"the generator wrote no {DGD_FILE}")
    if any(replica.sku for replica in roles.values()):
        _pin_role_gpus(folder / DGD_FILE, sample, mode)


def gpu_node_selector(sku: str) -> dict[str, str] | None:
    """The node labels aiconfigurator's generator schedules a GPU type's workers with (its hardware facts)."""
    from aiconfigurator.generator.facts import request_resolution

    facts = Path(request_resolution.__file__).with_name("hardware.yaml")
    profiles = (yaml.safe_load(facts.read_text(encoding="utf-8")) or {}).get("profiles", {})
    profile = profiles.get(request_resolution.hardware_key_for_system(sku)) or {}
    return dict(profile["node_selector"]) if profile.get("node_selector") else None


def _pin_role_gpus(path: Path, sample: dict[str, Any], mode: str) -> None:
    """Give each worker service the node selector of its role's GPU type (and name the type in a label)."""
    dgd = yaml.safe_load(path.read_text(encoding="utf-8"))
    for service in dgd.get("spec", {}).get("services", {}).values():
        if service.get("componentType") != "worker":
            continue
        role = service.get("subComponentType") or "agg"
        sku = role_sku(sample, "agg" if mode == "agg" else role)
        pod = service.setdefault("extraPodSpec", {})
        selector = gpu_node_selector(sku)
        if selector is None:
            pod.pop("nodeSelector", None)  # the decode type's labels would schedule this role on the wrong GPUs
        else:
            pod["nodeSelector"] = selector
        service.setdefault("labels", {})[GPU_TYPE_LABEL] = sku
    atomic_write_text(path, yaml.safe_dump(dgd, sort_keys=False))


def _sizing(sample: dict[str, Any], role: str, replica: ReplicaConfig) -> Any:
    from aiconfigurator.generator.request import RoleSizing

    shape = replica.shape
    return RoleSizing(
        tensor_parallel_size=shape.tp,
        data_parallel_size=shape.attention_dp,
        moe_tensor_parallel_size=shape.moe_tp,
        moe_expert_parallel_size=shape.moe_ep,
        max_batch_size=int(sample[f"{role}_max_num_seqs"]),
        extra={generic: sample[f"{role}_{ours}"] for ours, generic in GENERIC_ENGINE_KEYS.items()},
    )


def differences(record: TrialRecord, dgd: dict[str, Any]) -> list[str]:
    """Every replayed setting the generated DGD changes or leaves out, one sentence each."""
    spec, sample = record.spec, record.spec.sample
    backend = sample["backend"]
    services = dgd.get("spec", {}).get("services", {})
    workers = {
        (service.get("subComponentType") or "agg"): service
        for service in services.values()
        if service.get("componentType") == "worker"
    }
    found: list[str] = []
    for role, replica in role_configs(spec.parallel_config).items():
        service = workers.get(role)
        if service is None:
            found.append(f"{role}: no worker service for this role in the DGD")
            continue
        found += _role_differences(role, replica, sample, backend, service)
    found += _gpu_differences(sample, spec.deployment_mode, workers)
    found += _router_differences(sample, services.get("Frontend", {}))
    if spec.replay.plan.planner_config is not None:
        found.append("planner: the DGD has no planner; replayed.json → planner_config is the configuration replayed")
    return found


def _role_differences(
    role: str, replica: ReplicaConfig, sample: dict[str, Any], backend: str, service: dict[str, Any]
) -> list[str]:
    found = []
    if int(service.get("replicas", 1)) != replica.replicas:
        found.append(f"{role}: replicas {replica.replicas} replayed, {service.get('replicas')} in the DGD")
    gpus = service.get("resources", {}).get("limits", {}).get("gpu")
    if gpus is not None and int(gpus) != replica.shape.gpus:
        found.append(f"{role}: {replica.shape.gpus} GPUs per worker replayed, {gpus} in the DGD")
    command = _command_text(service)
    wanted = {"tp": replica.shape.tp, **{setting: sample[f"{role}_{setting}"] for setting in ENGINE_SETTINGS}}
    for setting, value in wanted.items():
        name = SETTING_NAMES[backend][setting]
        if name is None:
            found.append(f"{role}: {setting}={value} was replayed; {backend}'s generated command has no such setting")
            continue
        emitted = _emitted(command, name)
        if emitted is None:
            found.append(f"{role}: {setting}={value} was replayed; the generated command leaves out {name.rstrip(':')}")
        elif not _same(emitted, value):
            found.append(f"{role}: {setting} {value} replayed, {emitted} in the DGD ({name.rstrip(':')})")
    return found


def _gpu_differences(sample: dict[str, Any], mode: str, workers: dict[str, dict[str, Any]]) -> list[str]:
    """A role on a GPU type the generator has no node labels for runs wherever the cluster puts it."""
    if "sku" not in sample and "prefill_sku" not in sample:
        return []
    found = []
    for role, service in workers.items():
        sku = role_sku(sample, "agg" if mode == "agg" else role)
        if not service.get("extraPodSpec", {}).get("nodeSelector"):
            found.append(f"{role}: replayed on {sku}; the generator knows no node label for it: add a nodeSelector")
    return found


def _router_differences(sample: dict[str, Any], frontend: dict[str, Any]) -> list[str]:
    command = _command_text(frontend)
    mode = sample.get("router_mode", "round_robin")
    emitted = _emitted(command, "--router-mode")
    found = []
    if emitted != ROUTER_FLAG[mode] and not (mode == "round_robin" and emitted is None):
        found.append(f"router: {mode} replayed, frontend --router-mode is {emitted}")
    weights = {k: sample[k] for k in ROUTER_WEIGHTS if k in sample}
    if weights:
        shown = ", ".join(f"{k}={v:g}" for k, v in weights.items())
        found.append(f"router: the DGD leaves the KV-router weights at Dynamo's defaults; replayed {shown}")
    return found


def _command_text(service: dict[str, Any]) -> str:
    container = service.get("extraPodSpec", {}).get("mainContainer", {})
    return " ".join(str(part) for part in container.get("args", []) or [])


def _emitted(command: str, name: str) -> str | None:
    if name.endswith(":"):
        found = re.search(rf"(?m)^\s*{re.escape(name)}[ \t]*([^\s]+)", command)
    else:
        found = re.search(rf"{re.escape(name)}(?:=|\s+)\"?([^\s\"]+)", command)
    return found.group(1) if found else None


def _same(emitted: str, value: Any) -> bool:
    try:
        return float(emitted) == float(value)
    except (TypeError, ValueError):
        return str(emitted) == str(value)


def _readme(summary: DeploymentFiles) -> str:
    lines = [f"# Rank {summary.rank}: {summary.deployment}", "", f"Trial `{summary.key}`.", ""]
    if summary.error:
        lines += [f"**No deployment files**: {summary.error}", ""]
    else:
        lines += [f"`{DGD_FILE}` (DynamoGraphDeployment) and `run_0.sh` come from aiconfigurator's generator.", ""]
    if summary.differences:
        lines += ["Differences from the replayed deployment (fix these before deploying):", ""]
        lines += [f"- {d}" for d in summary.differences]
    elif not summary.error:
        lines.append("The generated files express the replayed deployment exactly (as far as they are checked).")
    return "\n".join(lines) + "\n"
