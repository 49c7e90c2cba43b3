"""The values a searched knob may take: each list knob's vocabulary or default list, and the checks of a value.

A list knob is either a choice from a fixed vocabulary (mode, backend, router mode) or any value the
engine or the router accepts, as Dynamo's own `MockEngineArgs` and `KvRouterConfig` judge it; the
reference's sets are the defaults. A composite knob's entry is a preset id or a self-contained dict
(`spica_lib.config.presets`). `SearchSpace` declares its knobs by these, and `spica evaluate` checks
a hand-given value by them.
"""

from __future__ import annotations

import math
from typing import Any

from pydantic import Field, ValidationError

from spica_lib.base.dynamo_env import prepare_dynamo_import
from spica_lib.config.fields import BACKENDS, DEPLOYMENT_MODES
from spica_lib.config.presets import COMPOSITE_KNOBS, CompositeEntry
from spica_lib.config.strict import first_error

# List knobs with a fixed vocabulary; the default is the whole list.
CHOICES: dict[str, tuple[str, ...]] = {
    "deployment_mode": DEPLOYMENT_MODES,
    "backend": BACKENDS,
    "router_mode": ("kv_router", "round_robin"),
}
# Engine knobs per role (any whole number the engine takes) and KV-router weights (any number the
# router takes). The defaults are the reference's sets.
ENGINE_KNOB_DEFAULTS: dict[str, tuple[int, ...]] = {
    "prefill_max_num_batched_tokens": (8192, 16384, 32768),
    "prefill_max_num_seqs": (1, 2, 4, 8, 16, 32, 64, 128, 256),
    "decode_max_num_batched_tokens": (8192,),
    "decode_max_num_seqs": (256, 512, 1024),
    "agg_max_num_batched_tokens": (8192, 16384, 32768),
    "agg_max_num_seqs": (256, 512, 1024),
}
ROUTER_WEIGHT_DEFAULTS: dict[str, tuple[float, ...]] = {
    "overlap_score_credit": (0.0, 0.5, 1.0),
    "prefill_load_scale": (0.0, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0),
    "host_cache_hit_weight": (0.5, 0.75, 1.0),
    "disk_cache_hit_weight": (0.0, 0.25, 0.5),
    "router_temperature": (0.0, 0.2, 0.5, 1.0),
}
KNOB_DEFAULTS: dict[str, tuple[Any, ...]] = {**CHOICES, **ENGINE_KNOB_DEFAULTS, **ROUTER_WEIGHT_DEFAULTS}


def list_knob_field(name: str) -> Any:
    """The SearchSpace field of a list knob: its default list, and its rule in the JSON schema."""
    return Field(
        default_factory=lambda: list(KNOB_DEFAULTS[name]),
        description=f"one value pins, several are searched; {_rule(name)}",
        json_schema_extra={"items": _item_schema(name), "minItems": 1},
    )


def _item_schema(name: str) -> dict[str, Any]:
    if name in CHOICES:
        return {"enum": list(CHOICES[name])}
    if name in ENGINE_KNOB_DEFAULTS:
        return {"type": "integer", "minimum": 1}
    return {"type": "number", "minimum": 0}


def composite_knob_field(name: str) -> Any:
    """The SearchSpace field of a composite knob: every preset, by default."""
    return Field(default_factory=lambda: list(COMPOSITE_KNOBS[name].presets))


def check_atomic_knob(name: str, values: list[Any]) -> list[Any]:
    """The knob's values, checked and in canonical form (a YAML 8192.0 becomes 8192)."""
    if not values:
        raise ValueError(f"list at least one value; {_rule(name)}")
    for value in values:
        if isinstance(value, dict):
            raise ValueError(f"takes plain values, not a dict entry ({value}); {_rule(name)}")
    if name in CHOICES:
        return [_choice(name, value) for value in values]
    if name in ENGINE_KNOB_DEFAULTS:
        return [_engine_value(name, value) for value in values]
    return [_router_weight(name, value) for value in values]


def _rule(name: str) -> str:
    if name in CHOICES:
        return f"allowed: {list(CHOICES[name])}"
    if name in ENGINE_KNOB_DEFAULTS:
        return "any whole number >= 1 the engine accepts, e.g. [2048, 8192]"
    return "any number >= 0 Dynamo's KV router accepts"


def _choice(name: str, value: Any) -> Any:
    allowed = list(CHOICES[name])
    if value not in allowed:
        raise ValueError(f"{value!r} is not a valid choice; allowed: {allowed}")
    return value


def _engine_value(name: str, value: Any) -> int:
    field = name.split("_", 1)[1]  # prefill_max_num_seqs -> max_num_seqs, as the engine names it
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    # bool is an int in Python: refuse it explicitly so `true` never passes for 1.
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{value!r} is not allowed: the engine's {field} is a whole number >= 1")
    refused = engine_refusal({field: value})
    if refused:
        raise ValueError(f"{value} is refused by Dynamo's engine: {refused}")
    return value


def _router_weight(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"{value!r} is not allowed: {name} is a finite number (Dynamo's KV router)")
    refused = router_refusal({name: float(value)})
    if refused:
        raise ValueError(f"{value} is refused by Dynamo's KV router: {refused}")
    return float(value)


def engine_refusal(arguments: dict[str, Any]) -> str | None:
    """Why Dynamo's mocker engine refuses these `MockEngineArgs`, or None."""
    prepare_dynamo_import()
    from dynamo.mocker import MockEngineArgs

    try:
        MockEngineArgs(**arguments)
    except Exception as exc:  # the engine's own validation (a Rust error surfaced as Exception)
        return (
            str(exc)
            .removeprefix("Failed to normalize MockEngineArgs: ")
            .removeprefix("Failed to validate MockEngineArgs: ")
        )
    return None


def router_refusal(arguments: dict[str, float]) -> str | None:
    """Why Dynamo's `KvRouterConfig` refuses these weights, or None."""
    prepare_dynamo_import()
    from dynamo.llm import KvRouterConfig

    try:
        KvRouterConfig(**arguments)
    except ValueError as exc:
        return str(exc)
    return None


def check_composite_knob(name: str, entries: list[CompositeEntry]) -> list[CompositeEntry]:
    """The knob's entries, checked: each a preset's id or a dict its entry model takes."""
    knob = COMPOSITE_KNOBS[name]
    presets = list(knob.presets)
    if not entries:
        raise ValueError(f"list at least one entry; presets: {presets}, or a dict with keys {list(knob.allowed_keys)}")
    for index, entry in enumerate(entries):
        if isinstance(entry, str):
            if entry not in knob.presets:
                raise ValueError(f"entry {index}: unknown preset {entry!r}; presets: {presets}")
            continue
        _check_composite_dict(knob, index, entry)
    return entries


def _check_composite_dict(knob: Any, index: int, entry: dict[str, Any]) -> None:
    where = f"entry {index}"
    if not entry:
        raise ValueError(f"{where}: a dict entry must not be empty; give the keys {list(knob.required_keys)}")
    unknown = sorted(set(entry) - set(knob.allowed_keys))
    if unknown:
        raise ValueError(f"{where}: unknown keys {unknown}; allowed: {list(knob.allowed_keys)}")
    missing = [key for key in knob.required_keys if key not in entry]
    if missing:
        raise ValueError(
            f"{where}: missing required keys {missing}; a dict entry replaces a preset as a whole, "
            f"so it must give {list(knob.required_keys)}"
        )
    try:
        knob.entry_model.model_validate(entry)
    except ValidationError as exc:
        raise ValueError(f"{where}: {first_error(exc)}") from None
