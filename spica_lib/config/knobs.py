"""The knob table: every searched setting of a deployment, declared once.

An entry says what the setting is called (the one name, in the config, the flat sample, the replayed engine and
the deployment check alike; a per-role knob's field is `<role>_<name>`), its kind (a choice from a vocabulary, a
number in a range, or on/off), whether each role has its own value, how it reaches the replay (a `MockEngineArgs`
argument of the role's engine, a `KvRouterConfig` argument, or the plan itself), how each engine spells it in a
deployment file, what it means and its default. Every stage reads it from here: the config model, the search
space, the replay plan, the deployment files and their check, `describe`, the DGDR mapping and the config
reference. docs/architecture.md ("How to add a knob") lists those modules; tests/test_knob_table.py keeps the
list true and adds a throw-away knob through this table alone.

This module imports nothing of Spica's, so that the table can be extended before anything reads it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

ALL_ROLES = ("prefill", "decode", "agg")  # every role an engine plays: a disagg pair's two, or an agg worker
BACKENDS = ("vllm", "sglang", "trtllm")

Kind = Literal["choice", "range", "switch"]
Reach = Literal["plan", "engine", "router"]


@dataclass(frozen=True)
class Flag:
    """`--name value` on the engine's command line (`aliases` are read too). `also`: the flags written beside it,
    each with the values the engine must see for the knob to mean the same (the first is the one written);
    `positive`: only a value above 0 says it (SGLang's chunk size of -1 is "no chunking")."""

    name: str
    aliases: tuple[str, ...] = ()
    also: Callable[[Any], dict[str, tuple[Any, ...]]] | None = None
    positive: bool = False


@dataclass(frozen=True)
class Switch:
    """An on/off flag: `on` or `off` on the command line (None: the engine has no such flag); `absent`: what the
    engine does when the command has neither."""

    on: str | None
    off: str | None
    absent: bool


@dataclass(frozen=True)
class JsonFlag:
    """A flag whose value is a JSON object: the knob is its `key`, written together with `fixed`."""

    name: str
    key: str
    fixed: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class EngineYaml:
    """A key of TRT-LLM's engine YAML (dotted for a nested one), written together with the keys `fixed`."""

    path: str
    fixed: dict[str, Any] = field(default_factory=dict)


Spelling = Flag | Switch | JsonFlag | EngineYaml


@dataclass(frozen=True)
class Knob:
    """One searched setting. `default`: a list knob's default list (a tuple), a pinned one's value; per role, a
    mapping of role to either."""

    name: str
    kind: Kind
    description: str
    default: Any
    reaches: Reach = "engine"
    roles: tuple[str, ...] = ()  # the roles with a value of their own; () is one value for the deployment
    searched: bool = True  # a list in the config (one value pins it, several are searched), else a pinned value
    choices: tuple[Any, ...] = ()  # a choice knob's vocabulary
    whole: bool = True  # a range knob's values are whole numbers
    # A range knob's bounds, checked by Spica; the replay's own part (MockEngineArgs, KvRouterConfig) judges the rest.
    minimum: float | None = None
    maximum: float | None = None
    above_minimum: bool = False  # the minimum itself is refused
    # The argument it reaches the replay as (`MockEngineArgs` or `KvRouterConfig`); per backend where they differ.
    replay: str | dict[str, str] | None = None
    # A value that changes nothing: left out of samples, replay arguments and deployment files alike, so a search
    # that never moves it keeps its trials and files as they were.
    inert: Any = None
    spellings: dict[str, Spelling] = field(default_factory=dict)  # backend -> how its deployment files say it
    # aiconfigurator's generator input for it (a `RoleSizing` field or a `params.<role>` key its backend mapping
    # lowers to each engine's flag, and its rules size other settings by); None: Spica writes the engine's spelling.
    generator: str | None = None
    # Every engine of a deployment is started with it (the value of the role that has one), as aiconfigurator's
    # generator rules do for MTP: a prefill engine sizes its KV cache for the draft layers its decode engine uses.
    every_engine: bool = False
    label: str = ""  # how `describe` shows a value ("{} seqs"); "" keeps it out of the one-line description
    needs: str | None = None  # a feature of the model its values other than the inert one need (facts/hardware.py)
    unreplayed: str = ""  # why the pinned replay cannot tell its values apart: only its default is taken
    # The setting it replaced: where the knob stays at its default, the old name is kept, unset, in the run id's hash
    # and in each sample (hence in ranked.csv), so that a run of before keeps its id and its columns.
    was: str | None = None

    def fields(self) -> tuple[str, ...]:
        """Its config fields: `<role>_<name>` per role, else its name."""
        return tuple(name for _, name in self.role_fields())

    def role_fields(self) -> list[tuple[str | None, str]]:
        """Each of its config fields with its role (None: the knob of the whole deployment)."""
        return [(role, role_field(role, self.name)) for role in self.roles] if self.roles else [(None, self.name)]

    def role_default(self, role: str | None) -> Any:
        """The default of its field for `role` (None: a knob of the whole deployment): a list knob's list."""
        default = self.default[role] if self.roles else self.default
        return list(default) if self.searched else default

    def replay_argument(self, backend: str) -> str | None:
        return self.replay.get(backend) if isinstance(self.replay, dict) else self.replay


def role_field(role: str, name: str) -> str:
    """A per-role knob's config field: `agg_max_num_seqs`, `decode_nextn`."""
    return f"{role}_{name}"


def _same_for_roles(value: Any, roles: tuple[str, ...] = ALL_ROLES) -> dict[str, Any]:
    return dict.fromkeys(roles, value)


def _sglang_mtp(steps: Any) -> dict[str, tuple[Any, ...]]:
    # SGLang runs a model's MTP head as EAGLE (NEXTN is its alias): a chain of `steps` drafts, one candidate each,
    # verified `steps + 1` tokens wide. Another top-k or width is another speculation than the replay's.
    return {"--speculative-algorithm": ("EAGLE", "NEXTN"), "--speculative-eagle-topk": (1,),
            "--speculative-num-draft-tokens": (int(steps) + 1,)}  # fmt: skip


def _router_setting(name: str, what: str, default: tuple[float, ...], label: str = "", unreplayed: str = "") -> Knob:
    """A setting of the KV router: a number its `KvRouterConfig` takes under the same name, said on the frontend.
    Its JSON schema says >= 0, as `KvRouterConfig` refuses any negative one (an editor flags it before a run); the
    config's check leaves every value to `KvRouterConfig` itself, which also bounds the cache weights by 1."""
    return Knob(name, "range", f"the KV router's {what}", default=default, reaches="router", whole=False, minimum=0,
                replay=name, label=label, unreplayed=unreplayed)  # fmt: skip


NO_HOST_TIER = "the pinned replay has no host-memory KV tier"

KNOBS: dict[str, Knob] = {
    knob.name: knob
    for knob in (
        Knob(
            "deployment_mode", "choice", "aggregated workers, or prefill and decode disaggregated",
            default=("disagg", "agg"), reaches="plan", choices=("disagg", "agg"),
        ),
        Knob(
            "backend", "choice", "the inference engine the workers run", default=("vllm",), reaches="plan",
            choices=BACKENDS,
        ),
        Knob(
            "max_num_batched_tokens", "range", "the most tokens one engine step schedules (chunked-prefill size)",
            default={"prefill": (8192, 16384, 32768), "decode": (8192,), "agg": (8192, 16384, 32768)},
            roles=ALL_ROLES, minimum=1, replay="max_num_batched_tokens", label="{} tok",
            generator="max_num_tokens",
            spellings={"vllm": Flag("--max-num-batched-tokens"),
                       "sglang": Flag("--chunked-prefill-size", positive=True), "trtllm": EngineYaml("max_num_tokens")},
        ),
        Knob(
            "max_num_seqs", "range", "the most requests one engine holds in a batch",
            default={"prefill": (1, 2, 4, 8, 16, 32, 64, 128, 256), "decode": (256, 512, 1024),
                     "agg": (256, 512, 1024)},
            roles=ALL_ROLES, minimum=1, replay="max_num_seqs", label="{} seqs", generator="max_batch_size",
            spellings={"vllm": Flag("--max-num-seqs"), "sglang": Flag("--max-running-requests"),
                       "trtllm": EngineYaml("max_batch_size")},
        ),
        Knob(
            "nextn", "range",
            "multi-token prediction (MTP): draft tokens per decode step from the model's MTP head, 0 for none; "
            "the replay's gain rests on nextn_accept_rates",
            default=_same_for_roles((0,), ("decode", "agg")), roles=("decode", "agg"), minimum=0, maximum=3,
            replay="aic_nextn", inert=0, every_engine=True, label="MTP {}", needs="mtp_head", was="aic_nextn",
            spellings={"vllm": JsonFlag("--speculative-config", "num_speculative_tokens", {"method": "mtp"}),
                       "sglang": Flag("--speculative-num-steps", also=_sglang_mtp),
                       "trtllm": EngineYaml("speculative_config.num_nextn_predict_layers", {"decoding_type": "MTP"})},
        ),
        Knob(
            "block_size", "range", "tokens per KV-cache block", default=_same_for_roles(64), roles=ALL_ROLES,
            searched=False, minimum=1, replay="block_size", generator="tokens_per_block",
            spellings={"vllm": Flag("--block-size"), "sglang": Flag("--page-size"),
                       "trtllm": EngineYaml("kv_cache_config.tokens_per_block")},
        ),
        Knob(
            "gpu_memory_utilization", "range", "the share of GPU memory an engine may fill (weights, activations "
            "and KV cache; TRT-LLM: its KV cache's share of the memory left free)",
            default=_same_for_roles(0.9), roles=ALL_ROLES, searched=False, whole=False, minimum=0,
            above_minimum=True, maximum=1, generator="kv_cache_free_gpu_memory_fraction",
            replay={"vllm": "gpu_memory_utilization", "sglang": "mem_fraction_static",
                    "trtllm": "free_gpu_memory_fraction"},
            spellings={"vllm": Flag("--gpu-memory-utilization"), "sglang": Flag("--mem-fraction-static"),
                       "trtllm": EngineYaml("kv_cache_config.free_gpu_memory_fraction")},
        ),
        Knob(
            "enable_prefix_caching", "switch", "reuse the KV cache of a prompt prefix already computed",
            default={"prefill": True, "decode": False, "agg": True}, roles=ALL_ROLES, searched=False,
            replay="enable_prefix_caching",
            spellings={"vllm": Switch("--enable-prefix-caching", "--no-enable-prefix-caching", absent=True),
                       "sglang": Switch(None, "--disable-radix-cache", absent=True),
                       "trtllm": EngineYaml("kv_cache_config.enable_block_reuse")},
        ),
        Knob(
            "router_mode", "choice", "how the frontend picks a worker: the KV-aware router, or round robin",
            default=("kv_router", "round_robin"), reaches="plan", choices=("kv_router", "round_robin"),
        ),
        _router_setting("overlap_score_credit", "credit for a worker's cached prefix", (0.0, 0.5, 1.0), "credit {:g}"),
        _router_setting("prefill_load_scale", "weight of a worker's prefill load",
                        (0.0, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0), "load {:g}"),
        _router_setting("host_cache_hit_weight", "weight of a prefix cached in host memory", (0.5, 0.75, 1.0),
                        unreplayed=NO_HOST_TIER),
        _router_setting("disk_cache_hit_weight", "weight of a prefix cached on disk", (0.0, 0.25, 0.5),
                        unreplayed=NO_HOST_TIER),
        _router_setting("router_temperature", "softmax temperature over worker scores (0: the best)",
                        (0.0, 0.2, 0.5, 1.0), "temp {:g}"),
    )
}  # fmt: skip


def role_knobs(role: str) -> list[Knob]:
    """The per-role knobs a role has, in table order."""
    return [knob for knob in KNOBS.values() if role in knob.roles]


def knob_fields(knobs: Any = None) -> list[str]:
    """Every config field of `knobs` (default: the whole table), in table order."""
    return [name for knob in (KNOBS.values() if knobs is None else knobs) for name in knob.fields()]


def field_knob(name: str) -> tuple[Knob, str | None] | None:
    """The knob a config field belongs to, and its role (None: not a knob's field)."""
    for knob in KNOBS.values():
        if not knob.roles and knob.name == name:
            return knob, None
        for role in knob.roles:
            if role_field(role, knob.name) == name:
                return knob, role
    return None


def router_knobs() -> list[Knob]:
    """The KV router's own settings (its `KvRouterConfig` arguments), in table order."""
    return [knob for knob in KNOBS.values() if knob.reaches == "router"]
