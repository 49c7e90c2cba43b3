"""The values a knob may take: each knob of the table (config/knobs.py) as a SearchSpace field, and the checks of
a value.

A list knob (one value pins it, several are searched) and a pinned knob alike take a choice from the knob's
vocabulary, an on/off, or a number within the table's bounds that the replay's own part accepts: Dynamo's
`MockEngineArgs` for an engine's knob, its `KvRouterConfig` for the router's. A composite knob's entry is a preset
id or a self-contained dict (`spica_lib.config.presets`). `SearchSpace` declares its knobs by these, and
`spica evaluate` checks a hand-given value by them.
"""

from __future__ import annotations

import math
from typing import Any

from pydantic import Field, StrictBool, StrictFloat, StrictInt, ValidationError

from spica_lib.base.dynamo_env import prepare_dynamo_import
from spica_lib.config.knobs import KNOBS, Knob, field_knob
from spica_lib.config.presets import COMPOSITE_KNOBS, CompositeEntry
from spica_lib.config.strict import first_error


def list_defaults() -> dict[str, list[Any]]:
    """Every list knob's field and its default list, in table order."""
    return {
        name: knob.role_default(role)
        for knob in KNOBS.values()
        if knob.searched
        for role, name in knob.role_fields()
    }


def knob_field(knob: Knob, role: str | None) -> tuple[Any, Any]:
    """The SearchSpace field of one knob (of one role): its type, its default and its rule in the JSON schema."""
    default = knob.role_default(role)
    if knob.searched:
        return list[Any], Field(
            default_factory=lambda: list(default),
            description=f"{knob.description}; one value pins it, several are searched; {_rule(knob)}",
            json_schema_extra={"items": _item_schema(knob), "minItems": 1},
        )
    bounds = {"ge" if not knob.above_minimum else "gt": knob.minimum, "le": knob.maximum}
    kind = StrictBool if knob.kind == "switch" else StrictInt if knob.whole else StrictInt | StrictFloat
    constraints = {key: bound for key, bound in bounds.items() if bound is not None and knob.kind == "range"}
    return kind, Field(default=default, description=knob.description, **constraints)


def _item_schema(knob: Knob) -> dict[str, Any]:
    if knob.kind == "choice":
        return {"enum": list(knob.choices)}
    if knob.kind == "switch":
        return {"type": "boolean"}
    schema: dict[str, Any] = {"type": "integer" if knob.whole else "number"}
    if knob.minimum is not None:
        schema["exclusiveMinimum" if knob.above_minimum else "minimum"] = knob.minimum
    if knob.maximum is not None:
        schema["maximum"] = knob.maximum
    return schema


def composite_knob_field(name: str) -> Any:
    """The SearchSpace field of a composite knob: every preset, by default."""
    return Field(default_factory=lambda: list(COMPOSITE_KNOBS[name].presets))


def check_atomic_knob(name: str, values: list[Any]) -> list[Any]:
    """The values of the knob field `name`, checked and in canonical form (a YAML 8192.0 becomes 8192)."""
    found = field_knob(name)
    if found is None:
        raise ValueError(f"{name} is not a knob of the table (config/knobs.py)")
    knob = found[0]
    if not values:
        raise ValueError(f"list at least one value; {_rule(knob)}")
    for value in values:
        if isinstance(value, dict):
            raise ValueError(f"takes plain values, not a dict entry ({value}); {_rule(knob)}")
    return [checked_value(knob, value) for value in values]


def checked_value(knob: Knob, value: Any) -> Any:
    """One value of `knob`, checked and in canonical form."""
    if knob.kind == "choice":
        if value not in knob.choices:
            raise ValueError(f"{value!r} is not a valid choice; allowed: {list(knob.choices)}")
        return value
    if knob.kind == "switch":
        if not isinstance(value, bool):
            raise ValueError(f"{value!r} is not allowed: {knob.name} is on or off (true or false)")
        return value
    value = _number(knob, value)
    if value == knob.inert:
        return value  # what changes nothing needs no part of the replay to accept it
    refused = replay_refusal(knob, value)
    if refused:
        owner = "KV router" if knob.reaches == "router" else "engine"
        raise ValueError(f"{value} is refused by Dynamo's {owner}: {refused}")
    return value


def _number(knob: Knob, value: Any) -> int | float:
    # bool is an int in Python: refuse it explicitly so `true` never passes for 1.
    if knob.reaches == "router":
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise ValueError(f"{value!r} is not allowed: {knob.name} is a finite number (Dynamo's KV router)")
        return float(value)
    if knob.whole and isinstance(value, float) and value.is_integer():
        value = int(value)
    number = int if knob.whole else int | float
    if isinstance(value, bool) or not isinstance(value, number) or not _within(knob, value):
        raise ValueError(f"{value!r} is not allowed: the engine's {knob.name} is {_kind_text(knob)}")
    return value


def _within(knob: Knob, value: float) -> bool:
    low, high = knob.minimum, knob.maximum
    above = low is None or value > low or (value == low and not knob.above_minimum)
    return above and (high is None or value <= high)


def _kind_text(knob: Knob) -> str:
    what = "a whole number" if knob.whole else "a number"
    low = "" if knob.minimum is None else f"{'>' if knob.above_minimum else '>='} {knob.minimum:g}"
    if knob.maximum is None:
        return f"{what} {low}".strip()
    return f"{what} from {knob.minimum:g} to {knob.maximum:g}" if low else f"{what} <= {knob.maximum:g}"


def _rule(knob: Knob) -> str:
    if knob.kind == "choice":
        return f"allowed: {list(knob.choices)}"
    if knob.kind == "switch":
        return "true or false"
    if knob.reaches == "router":
        low = "" if knob.minimum is None else f" >= {knob.minimum:g}"
        return f"any number{low} Dynamo's KV router accepts"
    return f"any {_kind_text(knob).removeprefix('a ')} the engine accepts"


def replay_refusal(knob: Knob, value: Any) -> str | None:
    """Why the replay's own part refuses this value of `knob` (each backend's engine where they name it
    differently), or None."""
    if knob.reaches == "router":
        return router_refusal({knob.replay_argument(""): float(value)})
    if knob.reaches != "engine":
        return None
    if not isinstance(knob.replay, dict):
        return engine_refusal({knob.replay: value})
    for backend, argument in knob.replay.items():
        refused = engine_refusal({"engine_type": backend, argument: value})
        if refused:
            return f"{backend}: {refused}"
    return None


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


def mocker_nextn_accept_rates(draft_tokens: int) -> list[float]:
    """The acceptance rates the pinned mocker applies to `draft_tokens` MTP drafts when it is given none (ai-dynamo
    1.5.1: 0.85, then 0.3, then 0): read from its own `MockEngineArgs`, so that an upgrade that changes them is said."""
    prepare_dynamo_import()
    from dynamo.mocker import MockEngineArgs

    return [float(rate) for rate in MockEngineArgs(aic_nextn=draft_tokens).aic_nextn_accept_rates.split(",")]


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
