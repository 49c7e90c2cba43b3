"""Every replayed setting, read back from the deployment files: what they change, leave out or cannot say.

Nothing here trusts the generator's inputs: each value is read from the v1beta1 document as written
(the YAML parsed back), from the command each component's container runs:

- a worker's argv: its `command` + `args`, or for a `bash -c` script (the generator writes SGLang's
  and TRT-LLM's workers so) the script's words; TRT-LLM's engine settings from the engine YAML the
  script writes (deploy/spellings.py);
- the frontend's flags, parsed by ai-dynamo 1.5.1's own frontend parser (`FrontendArgGroup`,
  `FrontendConfig`): the router mode and the KV router's settings the frontend would run with;
- the planner's `--config`, validated by ai-dynamo's `PlannerConfig`, and compared key by key.

Each engine knob is read by the one spelling the knob table (config/knobs.py) gives each backend; a knob left out
is correct only where the engine then does what was replayed (the table's value that changes nothing, or a switch's
`absent`: prefix caching on in vLLM and SGLang). The layout (TP, attention DP, MoE TP/EP) and chunked prefill are
read here, each backend its own way; one left out is correct where the engine's default is the replayed value, as
listed in LAYOUT_DEFAULTS.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any

from spica_lib.base.dynamo_env import prepare_dynamo_import
from spica_lib.config.knobs import KNOBS, router_knobs
from spica_lib.deploy.dgd import GPU, components_by_role, main_container
from spica_lib.deploy.generator import ROUTER_FLAG
from spica_lib.deploy.replayed import Replayed, RoleEngine
from spica_lib.deploy.spellings import Flags, command_words, read

LAYOUT_SETTINGS = ("tp", "attention_dp", "moe_tp", "moe_ep", "chunked_prefill")
MOE_SETTINGS = ("moe_tp", "moe_ep")
# What an engine does with a layout its command leaves out (the images' vLLM 0.28 and SGLang 0.5.18).
LAYOUT_DEFAULTS = {
    "vllm": {"tp": 1, "attention_dp": 1, "moe_ep": 1},
    "sglang": {},
    "trtllm": {"attention_dp": 1, "moe_ep": 1, "moe_tp": 1},
}


def differences(played: Replayed, dgd: dict[str, Any], skus: dict[str, str]) -> list[str]:
    """Every replayed setting the DGD changes or leaves out, one sentence each (empty: it says them all)."""
    components = components_by_role(dgd)
    found: list[str] = []
    for role, engine in played.roles.items():
        component = components.get(role)
        if component is None:
            found.append(f"{role}: no component for this role in the DGD")
            continue
        found += _role_differences(played.backend, engine, component, played.engine_settings(role))
        selector = component.get("podTemplate", {}).get("spec", {}).get("nodeSelector")
        if not selector:
            found.append(
                f"{role}: replayed on {skus[role]}; aiconfigurator knows no node label for it: add a nodeSelector"
            )
    found += _router_differences(played, components.get("frontend"))
    found += _planner_differences(played, components.get("planner"))
    if played.startup_time is not None:
        found.append(
            f"planner: a worker start-up of {played.startup_time:g} s was simulated; a deployment cannot set it "
            "(a real worker takes as long as its image, weights and engine take to load)"
        )
    return found


def deployed_engine(backend: str, component: dict[str, Any]) -> dict[str, Any]:
    """The engine settings one worker component's command runs with: its layout (None: not in the command) and each
    knob the table spells for this backend (left out: what the engine then does)."""
    words, engine_yaml = command_words(main_container(component))
    flags = Flags(words)
    deployed = LAYOUT_READERS[backend](flags, engine_yaml or {})
    for knob in KNOBS.values():
        if backend in knob.spellings:
            deployed[knob.name] = read(knob.spellings[backend], flags, engine_yaml or {}, knob.inert)
    return deployed


def _role_differences(backend: str, engine: RoleEngine, component: dict[str, Any], knobs: dict[str, Any]) -> list[str]:
    role = engine.role
    found = []
    if component.get("replicas") != engine.workers:
        found.append(f"{role}: {engine.workers} workers replayed, {component.get('replicas')} in the DGD")
    limits = main_container(component).get("resources", {}).get("limits", {})
    nodes = int(component.get("multinode", {}).get("nodeCount", 1))
    if GPU not in limits or int(limits[GPU]) * nodes != engine.gpus:
        found.append(f"{role}: {engine.gpus} GPUs per worker replayed, {limits.get(GPU)} x {nodes} node(s) in the DGD")
    deployed = deployed_engine(backend, component)
    defaults = LAYOUT_DEFAULTS[backend]
    moe = engine.moe_tp * engine.moe_ep > 1
    wanted_settings = {setting: getattr(engine, setting) for setting in LAYOUT_SETTINGS} | knobs
    for setting, wanted in wanted_settings.items():
        if setting in MOE_SETTINGS and not moe:
            continue
        value = deployed.get(setting)
        if value is None and setting in defaults:
            value = defaults[setting]
        if value is None and wanted is not None:
            found.append(f"{role}: {setting}={wanted} was replayed; the {backend} command leaves it out")
        elif not _same(value, wanted):
            found.append(f"{role}: {setting} {wanted} replayed, {value} in the {backend} command")
    return found


def _router_differences(played: Replayed, frontend: dict[str, Any] | None) -> list[str]:
    if frontend is None:
        return ["router: the DGD has no frontend"]
    config = frontend_config(main_container(frontend))
    found = []
    if config.router_mode != ROUTER_FLAG[played.router_mode]:
        found.append(f"router: {played.router_mode} replayed, the frontend routes {config.router_mode}")
    for name, wanted in played.router.items():
        if name not in {knob.name for knob in router_knobs()}:
            found.append(f"router: {name}={wanted} was replayed; the frontend has no such setting")
        elif not _same(getattr(config, name), wanted):
            found.append(f"router: {name} {wanted:g} replayed, {getattr(config, name)} on the frontend")
    return found


def frontend_config(main: dict[str, Any]) -> Any:
    """What ai-dynamo's frontend makes of this container's flags (its own parser and config)."""
    prepare_dynamo_import()
    from dynamo.frontend.frontend_args import FrontendArgGroup, FrontendConfig

    words = [*main.get("command", []), *main.get("args", [])]
    start = words.index("dynamo.frontend") + 1 if "dynamo.frontend" in words else 0
    parser = argparse.ArgumentParser(exit_on_error=False)
    FrontendArgGroup().add_arguments(parser)
    config = FrontendConfig.from_cli_args(parser.parse_args(words[start:]))
    config.validate()
    return config


def _planner_differences(played: Replayed, planner: dict[str, Any] | None) -> list[str]:
    if played.planner is None:
        return [] if planner is None else ["planner: none was replayed, the DGD deploys one"]
    if planner is None:
        return ["planner: a planner was replayed; the DGD has none"]
    deployed = planner_config(main_container(planner))
    found = []
    for key, wanted in played.planner.items():
        if deployed.get(key) != wanted:
            found.append(f"planner: {key}={wanted!r} replayed, {deployed.get(key)!r} in the Planner's --config")
    return found


def planner_config(main: dict[str, Any]) -> dict[str, Any]:
    """The Planner's `--config` payload, refused by ai-dynamo's own `PlannerConfig` if it would be."""
    args = main.get("args", [])
    payload = json.loads(args[args.index("--config") + 1])
    prepare_dynamo_import()
    from dynamo.planner.config.planner_config import PlannerConfig

    PlannerConfig.model_validate(payload)
    return payload


def _vllm(flags: Flags, _: dict[str, Any]) -> dict[str, Any]:
    tp, dp = flags.number("--tensor-parallel-size", "-tp"), flags.number("--data-parallel-size", "-dp")
    width = (tp or 1) * (dp or 1)
    expert = flags.has("--enable-expert-parallel")
    return {
        "tp": tp, "attention_dp": dp,
        "moe_ep": width if expert else 1, "moe_tp": 1 if expert else width,
        "chunked_prefill": _switch(flags, "--enable-chunked-prefill", "--no-enable-chunked-prefill"),
    }  # fmt: skip


def _sglang(flags: Flags, _: dict[str, Any]) -> dict[str, Any]:
    """SGLang's `--tp` is the worker's width: with `--enable-dp-attention` it holds the `--dp` attention
    ranks (attention TP = tp / dp), and its experts split it `--ep` ways (MoE TP = tp / ep)."""
    chunk = flags.number("--chunked-prefill-size")
    width = flags.number("--tensor-parallel-size", "--tp-size", "--tp") or 1
    dp = flags.number("--data-parallel-size", "--dp-size", "--dp") or 1
    attention = flags.has("--enable-dp-attention")
    ep = flags.number("--expert-parallel-size", "--ep-size", "--ep") or 1
    return {
        "tp": width / dp if attention else width,
        "attention_dp": dp if attention or dp == 1 else None,  # plain DP is not the attention DP replayed
        "moe_tp": width / ep,
        "moe_ep": ep,
        "chunked_prefill": None if chunk is None else chunk > 0,
    }


def _trtllm(_: Flags, engine: dict[str, Any]) -> dict[str, Any]:
    width = engine.get("tensor_parallel_size")
    attention_dp = bool(engine.get("enable_attention_dp"))  # TRT-LLM then runs attention data-parallel on all ranks
    return {
        "tp": 1 if attention_dp else width,
        "attention_dp": width if attention_dp else None,
        "moe_tp": engine.get("moe_tensor_parallel_size"),
        "moe_ep": engine.get("moe_expert_parallel_size"),
        "chunked_prefill": engine.get("enable_chunked_prefill"),
    }


LAYOUT_READERS: dict[str, Callable[[Flags, dict[str, Any]], dict[str, Any]]] = {
    "vllm": _vllm, "sglang": _sglang, "trtllm": _trtllm,
}  # fmt: skip


def _switch(flags: Flags, on: str, off: str) -> bool | None:
    if flags.has(off):
        return False
    return True if flags.has(on) else None


def _same(deployed: Any, wanted: Any) -> bool:
    if isinstance(wanted, bool) or isinstance(deployed, bool):
        return deployed is wanted
    try:
        return float(deployed) == float(wanted)
    except (TypeError, ValueError):
        return deployed == wanted
