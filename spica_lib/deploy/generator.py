"""aiconfigurator's generator, asked for the replayed deployment through its own inputs.

Every replayed setting goes in as a generator input, so the generator's own backend mapping
(`backend_config_mapping.yaml`) turns it into each engine's flag:

- per role (`RoleSizing` and its `extra`, lowered to `params.<role>`): TP, attention DP, MoE TP/EP,
  `max_batch_size` (vLLM `--max-num-seqs`, SGLang `--max-running-requests`, TRT-LLM `max_batch_size`),
  `max_num_tokens` (`--max-num-batched-tokens`, TRT-LLM `max_num_tokens`; SGLang has none: its
  `enable_chunked_prefill` mapping sets `--chunked-prefill-size` to it), `tokens_per_block`,
  `kv_cache_free_gpu_memory_fraction`, `enable_chunked_prefill` and `disable_prefix_cache`;
- `DynConfig.router_mode` / `router_config` (the frontend's `--router-kv-overlap-score-credit`,
  `--router-prefill-load-scale`, `--router-temperature`, ...) and `enable_router` for a KV router,
  which makes the workers publish the KV events the replayed router routed on;
- `DynConfig.planner_config`: the replayed planner payload, deployed as a Planner component;
- `ModelConfig.nextn` for a multi-token-prediction depth;
- `K8sConfig.k8s_image` (the installed release's runtime image; `BackendSpec.dynamo_version` cannot
  say 1.5.1: the generator's version table ends at 1.3.0 and refuses it), `K8sConfig.k8s_namespace`
  and `K8sConfig.name`.

The generator writes v1alpha1 documents into a scratch folder; they are returned as data
(deploy/dgd.py makes the v1beta1 document the operator stores from them).
"""

from __future__ import annotations

import json
import logging
import tempfile
from pathlib import Path
from typing import Any

import yaml

from spica_lib.deploy.release import installed_release
from spica_lib.deploy.replayed import Replayed, RoleEngine

DGD_FILE = "k8s_deploy.yaml"
ROUTER_FLAG = {"kv_router": "kv", "round_robin": "round-robin"}


def generated_documents(
    played: Replayed, *, name: str, namespace: str, system: str, isl: int | None, osl: int | None,
    gpus_per_node: int,
) -> list[dict[str, Any]]:  # fmt: skip
    """The generator's Kubernetes documents for the replayed deployment (v1alpha1 DGD first)."""
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

    with tempfile.TemporaryDirectory(prefix="spica-generator-") as scratch:
        request = GeneratorRequest(
            model=ModelSpec(model_path=played.model),
            backend=BackendSpec(name=played.backend),
            topology=Topology(
                mode=played.mode,
                roles={role: _sizing(engine, played.backend) for role, engine in played.roles.items()},
                workers={role: engine.workers for role, engine in played.roles.items()},
            ),
            platform=Platform(hardware_profile=system),
            sla=SlaSpec(isl=isl, osl=osl),
            emit=EmitTargets(output_dir=scratch, run_script=False),
            overrides=Overrides(raw=_raw_inputs(played, name, namespace, gpus_per_node)),
        )
        problems = request.validate()
        if problems:
            raise ValueError("; ".join(map(str, problems)))
        logging.getLogger("aiconfigurator").setLevel(logging.ERROR)
        generate_from_request(request)
        path = Path(scratch) / DGD_FILE
        if not path.is_file():
            raise FileNotFoundError(f"the generator wrote no {DGD_FILE}")
        documents = [doc for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")) if doc]
    if played.backend == "vllm":
        _complete_vllm(documents[0], played)
    return documents


def _complete_vllm(dgd: dict[str, Any], played: Replayed) -> None:
    """Add to each vLLM worker's argv what the generator's vLLM template has no place for.

    Its `cli_args.j2` emits neither the memory fraction (the mapping has `gpu-memory-utilization`, the
    template drops it) nor chunked prefill, and loses the speculative config its `vllm.rule` sets for a
    multi-token-prediction depth; all were replayed, so all are stated.
    """
    for service in dgd["spec"]["services"].values():
        if service.get("componentType") != "worker":
            continue
        engine = played.roles[service.get("subComponentType") or "agg"]
        args = service["extraPodSpec"]["mainContainer"].setdefault("args", [])
        if "--gpu-memory-utilization" not in args:
            args += ["--gpu-memory-utilization", f"{engine.memory_fraction:g}"]
        if not {"--enable-chunked-prefill", "--no-enable-chunked-prefill"} & set(args):
            args.append("--enable-chunked-prefill" if engine.chunked_prefill else "--no-enable-chunked-prefill")
        if (
            engine.nextn and "--speculative-config" not in args
        ):  # its vllm.rule sets method "mtp", its template loses it
            args += ["--speculative-config", json.dumps({"method": "mtp", "num_speculative_tokens": engine.nextn})]


def _raw_inputs(played: Replayed, name: str, namespace: str, gpus_per_node: int) -> dict[str, Any]:
    kv = played.router_mode == "kv_router"
    raw: dict[str, Any] = {
        "preserve_engine_limits": True,
        "DynConfig.router_mode": ROUTER_FLAG[played.router_mode],
        "DynConfig.enable_router": kv,
        "K8sConfig.k8s_image": installed_release().backends[played.backend].image,
        "K8sConfig.k8s_namespace": namespace,
        "K8sConfig.name": name,
        "NodeConfig.num_gpus_per_node": gpus_per_node,
    }
    if played.router:
        raw["DynConfig.router_config"] = dict(played.router)
    if played.planner is not None:
        raw["DynConfig.planner_config"] = dict(played.planner)
    if any(engine.moe_ep * engine.moe_tp > 1 for engine in played.roles.values()):
        raw["ModelConfig.is_moe"] = True
    nextn = {engine.nextn for engine in played.roles.values()} - {None, 0}
    if nextn:
        raw["ModelConfig.nextn"] = max(nextn)
    return raw


def _sizing(engine: RoleEngine, backend: str) -> Any:
    from aiconfigurator.generator.request import RoleSizing

    extra: dict[str, Any] = {
        "max_num_tokens": engine.max_num_batched_tokens,
        "tokens_per_block": engine.block_size,
        "kv_cache_free_gpu_memory_fraction": engine.memory_fraction,
        "enable_chunked_prefill": engine.chunked_prefill,
        "disable_prefix_cache": not engine.prefix_caching,
        "enable_attention_dp": engine.attention_dp > 1,
        "enable_expert_parallel": engine.moe_ep > 1,  # vLLM's only say in expert parallelism
    }
    if backend == "sglang":
        # aiconfigurator 0.12.0 evaluates the mapping `chunked-prefill-size: max_num_tokens if max_num_tokens
        # else -1` with only `enable_chunked_prefill` in scope, so it always writes -1 (chunking off). The
        # SGLang key itself is a generator input too (a backend key of params.<role>): it is given instead.
        del extra["enable_chunked_prefill"]
        extra["chunked-prefill-size"] = engine.max_num_batched_tokens if engine.chunked_prefill else -1
    return RoleSizing(
        tensor_parallel_size=engine.tp,
        pipeline_parallel_size=1,  # the replay runs no pipeline parallelism; unset, TRT-LLM's YAML gets a null
        data_parallel_size=engine.attention_dp,
        moe_tensor_parallel_size=engine.moe_tp,
        moe_expert_parallel_size=engine.moe_ep,
        max_batch_size=engine.max_num_seqs,
        extra=extra,
    )
