"""The config reference as Markdown, generated from the config models (`spica schema --markdown`).

The documentation site's reference page (docs/reference/config.md) is this output, written when the site is built
(`make docs`), so it cannot drift from the code: every section, field, type, allowed set and bound is read from
the models' JSON Schema, and each default from the pydantic field itself (a list default made by a factory
included). docs/config.md explains the fields in words; this page lists them all.
"""

from __future__ import annotations

import json
import typing
from typing import Any

from pydantic import BaseModel
from pydantic_core import to_jsonable_python

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
    return "\n".join(lines) + "\n"


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
