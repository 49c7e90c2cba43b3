"""The config reference as Markdown, generated from the config models (`spica schema --markdown`).

The documentation site's reference page (docs/reference/config.md) is this output, written when the site is built
(`make docs`), so it cannot drift from the code: every section, field, type, allowed set and bound is read from
the models' JSON Schema, and each default from the pydantic field itself (a list default made by a factory
included); the knob table (config/knobs.py) is listed after it, with how each knob reaches the replay and how each
engine's deployment files spell it. docs/config.md explains the fields in words; this page lists them all.
"""

from __future__ import annotations

import json
import typing
from typing import Any

from pydantic import BaseModel
from pydantic_core import to_jsonable_python

from spica_lib.config.knobs import KNOBS, EngineYaml, Flag, JsonFlag, Knob, Spelling, Switch
from spica_lib.config.root import SmartSearchConfig

SECTIONS = ("search_space", "workload", "goal", "sweep", "calibration")


def config_reference() -> str:
    schema = SmartSearchConfig.model_json_schema()
    defs = schema.get("$defs", {})
    lines = [
        "# Config reference",
        "",
        "Generated from the config models (`spica schema --markdown`) when this site is built: every field, its",
        "type, its default and its allowed values, as the code reads them. [Writing a config](../config.md) says",
        "what each does; a field outside these tables is refused by name. A default of `null` means unset: where",
        "Spica fills such a field from the others (the finish's sample counts, the equivalence margin, the replay's",
        "time limit, the algorithm, ...), Writing a config says how, and a run's `config.json` holds the value used.",
    ]
    for section in SECTIONS:
        ref = _ref(schema["properties"][section])
        model = _model(SmartSearchConfig.model_fields[section].annotation)
        if ref is None or model is None:
            continue
        entry = defs[ref]
        lines += ["", f"## `{section}`", ""]
        if entry.get("description"):
            lines += [_one_line(entry["description"]), ""]
        lines += ["| field | type | default | notes |", "|---|---|---|---|"]
        required = set(entry.get("required", []))
        for name, field in entry.get("properties", {}).items():
            default = "required" if name in required else _default(model, name)
            notes = _one_line(field.get("description", ""))
            lines.append(f"| `{name}` | {_type(field, defs)} | {default} | {notes} |")
    return "\n".join(lines + _knob_table()) + "\n"


def _knob_table() -> list[str]:
    """The knob table: each knob's fields, kind, how it reaches the replay and how each engine spells it."""
    lines = [
        "", "## Knobs", "",
        "Each searched setting of `search_space` is one entry of the knob table (`spica_lib/config/knobs.py`): its",
        "fields (one per role, `<role>_<name>`, where each role has its own), its kind, the argument it reaches the",
        "replay as (Dynamo's `MockEngineArgs` for an engine, `KvRouterConfig` for the router), and how each engine's",
        "deployment files say it. A value that changes nothing is left out of the replay and the files alike.",
        "", "| knob | fields | kind | replay | vLLM | SGLang | TRT-LLM |", "|---|---|---|---|---|---|---|",
    ]  # fmt: skip
    for knob in KNOBS.values():
        fields = ", ".join(f"`{name}`" for name in knob.fields())
        cells = [_spelled(knob.spellings.get(backend)) for backend in ("vllm", "sglang", "trtllm")]
        if knob.reaches == "router":  # the frontend's, whatever the engine
            cells = [f"the frontend's `{knob.name}`"] * len(cells)
        lines.append(f"| `{knob.name}` | {fields} | {_kind(knob)} | {_replay(knob)} | " + " | ".join(cells) + " |")
    return lines


def _kind(knob: Knob) -> str:
    kind = {"choice": "choice", "range": "range", "switch": "on/off"}[knob.kind]
    kind += "" if knob.searched else ", pinned"
    return kind + (f"; {_one_line(knob.unreplayed)}: only its default" if knob.unreplayed else "")


def _replay(knob: Knob) -> str:
    if knob.reaches == "plan":
        return "the deployment plan"
    where = "KvRouterConfig" if knob.reaches == "router" else "MockEngineArgs"
    if isinstance(knob.replay, dict):
        return f"{where} " + ", ".join(f"`{argument}` ({backend})" for backend, argument in knob.replay.items())
    return f"{where} `{knob.replay}`"


def _spelled(spelling: Spelling | None) -> str:
    if spelling is None:
        return "—"
    if isinstance(spelling, Switch):
        return " / ".join(f"`{flag}`" for flag in (spelling.on, spelling.off) if flag)
    if isinstance(spelling, JsonFlag):
        return f"`{spelling.name}` `{spelling.key}` (with {_pairs(spelling.fixed)})"
    if isinstance(spelling, EngineYaml):
        return f"engine YAML `{spelling.path}`" + (f" (with {_pairs(spelling.fixed)})" if spelling.fixed else "")
    also = spelling.also(1) if isinstance(spelling, Flag) and spelling.also else {}
    return f"`{spelling.name}`" + (f" (with {', '.join(f'`{flag}`' for flag in also)})" if also else "")


def _pairs(pairs: dict[str, Any]) -> str:
    return ", ".join(f"`{key}: {value}`" for key, value in pairs.items())


def _model(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model a section's annotation names (`X | None` and `list[X]` included)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        found = _model(arg)
        if found is not None:
            return found
    return None


def _ref(field: dict[str, Any]) -> str | None:
    if "$ref" in field:
        return field["$ref"].split("/")[-1]
    for option in field.get("anyOf", []):
        if "$ref" in option:
            return option["$ref"].split("/")[-1]
    return None


def _type(field: dict[str, Any], defs: dict[str, Any]) -> str:
    if "$ref" in field:
        target = defs[field["$ref"].split("/")[-1]]
        if "enum" in target:
            return "one of " + ", ".join(f"`{v}`" for v in target["enum"])
        return target.get("title", "object")
    if "anyOf" in field:
        return " or ".join(_type(option, defs) for option in field["anyOf"])
    if "enum" in field:
        return "one of " + ", ".join(f"`{v}`" for v in field["enum"])
    if field.get("const") is not None:
        return f"`{field['const']}`"
    kind = field.get("type", "any")
    if kind == "array":
        items = field.get("items", {})
        return f"list of {_type(items, defs)}" if items else "list"
    if kind == "object" and "additionalProperties" in field and isinstance(field["additionalProperties"], dict):
        return f"map to {_type(field['additionalProperties'], defs)}"
    bounds = [f"{word} {field[key]:g}" for key, word in (("minimum", "≥"), ("exclusiveMinimum", ">"),
              ("maximum", "≤"), ("exclusiveMaximum", "<")) if key in field]  # fmt: skip
    return kind + (f" ({', '.join(bounds)})" if bounds else "")


def _default(model: type[BaseModel], name: str) -> str:
    """The field's own default, a factory's called (the JSON Schema leaves those out)."""
    value = model.model_fields[name].get_default(call_default_factory=True)
    return "`" + json.dumps(to_jsonable_python(value)).replace("|", "\\|") + "`"


def _one_line(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")
