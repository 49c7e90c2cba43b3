"""aiconfigurator's generator, asked for the replayed deployment through its own inputs.

Every replayed setting the generator has an input for goes in as that input, so the generator's own backend
mapping (`backend_config_mapping.yaml`) turns it into each engine's flag, and its rules size the rest by it (CUDA
graphs by the batch size):

- per role (`RoleSizing` and its `extra`, lowered to `params.<role>`): TP, attention DP, MoE TP/EP,
  `enable_chunked_prefill`, and each engine knob whose table entry (config/knobs.py) names its `generator` input
  (`max_batch_size`, `max_num_tokens`, `tokens_per_block`, `kv_cache_free_gpu_memory_fraction`; SGLang has no
  `max_num_tokens`: its `enable_chunked_prefill` mapping sets `--chunked-prefill-size` to it);
- `DynConfig.router_mode` / `router_config` (the frontend's `--router-kv-overlap-score-credit`,
  `--router-prefill-load-scale`, `--router-temperature`, ...) and `enable_router` for a KV router,
  which makes the workers publish the KV events the replayed router routed on;
- `DynConfig.planner_config`: the replayed planner payload, deployed as a Planner component;
- `K8sConfig.k8s_image` (the installed release's runtime image; `BackendSpec.dynamo_version` cannot
  say 1.5.1: the generator's version table ends at 1.3.0 and refuses it), `K8sConfig.k8s_namespace`
  and `K8sConfig.name`.

Then each engine knob the generated command leaves out or says otherwise (one without a generator input, such as
prefix caching or MTP drafts; one a template drops, such as vLLM's memory fraction and speculative config) is written
in the engine's own spelling from the table (deploy/spellings.py), so a new knob needs no line here. The generator
writes v1alpha1 documents into a scratch folder; they are returned as data (deploy/dgd.py makes the v1beta1 document
the operator stores from them).
"""

from __future__ import annotations

import dataclasses
import logging
import tempfile
from pathlib import Path
from typing import Any

import yaml

from spica_lib.config.knobs import KNOBS, role_knobs
from spica_lib.deploy.release import installed_release
from spica_lib.deploy.replayed import Replayed, RoleEngine
from spica_lib.deploy.spellings import Flags, command_words, read, write

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
    for role, main in _workers(documents[0]):
        _state_knobs(main, played, role)
        if played.backend == "vllm":
            _complete_vllm_chunking(main, played.roles[role])
    return documents


def _workers(dgd: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """Each worker service's role and main container (v1alpha1, as the generator writes them)."""
    return [
        (service.get("subComponentType") or "agg", service["extraPodSpec"]["mainContainer"])
        for service in dgd["spec"]["services"].values()
        if service.get("componentType") == "worker"
    ]


def _state_knobs(main: dict[str, Any], played: Replayed, role: str) -> None:
    """Write each engine knob the command leaves out or says otherwise, in the engine's spelling from the table."""
    for name, wanted in played.engine_settings(role).items():
        spelling = KNOBS[name].spellings.get(played.backend)
        if spelling is None:
            continue  # the config refuses a value a backend cannot be told; the check names any left
        words, engine_yaml = command_words(main)
        if read(spelling, Flags(words), engine_yaml or {}, KNOBS[name].inert) != wanted:
            write(main, spelling, wanted)


def _complete_vllm_chunking(main: dict[str, Any], engine: RoleEngine) -> None:
    """vLLM's `cli_args.j2` has no place for chunked prefill (not a knob: the mocker's default, replayed): stated."""
    args = main.setdefault("args", [])
    if not {"--enable-chunked-prefill", "--no-enable-chunked-prefill"} & set(args):
        args.append("--enable-chunked-prefill" if engine.chunked_prefill else "--no-enable-chunked-prefill")


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
    return raw


def _sizing(engine: RoleEngine, backend: str) -> Any:
    from aiconfigurator.generator.request import RoleSizing

    # Each engine knob with a generator input goes in as it: a `RoleSizing` field, or a key of its `extra`.
    given = {knob.generator: engine.settings[knob.name] for knob in role_knobs(engine.role) if knob.generator}
    sizing_fields = {field.name for field in dataclasses.fields(RoleSizing)}
    fields = {key: value for key, value in given.items() if key in sizing_fields}
    extra: dict[str, Any] = {key: value for key, value in given.items() if key not in fields}
    extra.update({
        "enable_chunked_prefill": engine.chunked_prefill,
        "enable_attention_dp": engine.attention_dp > 1,
        "enable_expert_parallel": engine.moe_ep > 1,  # vLLM's only say in expert parallelism
    })  # fmt: skip
    if backend == "sglang":
        # aiconfigurator 0.12.0 evaluates the mapping `chunked-prefill-size: max_num_tokens if max_num_tokens
        # else -1` with only `enable_chunked_prefill` in scope, so it always writes -1 (chunking off). The
        # SGLang key itself is a generator input too (a backend key of params.<role>): it is given instead.
        del extra["enable_chunked_prefill"]
        chunk = engine.settings["max_num_batched_tokens"]
        extra["chunked-prefill-size"] = chunk if engine.chunked_prefill else -1
    return RoleSizing(
        tensor_parallel_size=engine.tp,
        pipeline_parallel_size=1,  # the replay runs no pipeline parallelism; unset, TRT-LLM's YAML gets a null
        data_parallel_size=engine.attention_dp,
        moe_tensor_parallel_size=engine.moe_tp,
        moe_expert_parallel_size=engine.moe_ep,
        **fields,
        extra=extra,
    )
