"""A DynamoGraphDeploymentRequest document read strictly, then by the pinned wheel's own types.

The wheel's DGDR types (`dynamo.profiler.utils.dgdr_v1beta1_types`) are lenient: they ignore `apiVersion`,
`kind` and `metadata`, drop unknown keys (a typo like `workload.islx` vanishes), and leave the defaults of
`backend` and `searchStrategy` as plain strings where a given value is an enum member. So a request is read
here in two steps, every problem named by its path:

1. Spica's own check: `apiVersion: nvidia.com/v1beta1`, the kind, `spec` present, the metadata as the API
   server checks it (config/k8s_metadata.py), and every key known to the wheel's models (an unknown key
   anywhere is refused by its path);
2. the wheel's types, for the values: enums, numbers, the SLA's options.

A null is the field's default wherever the wheel takes it (`isl: null` is ISL 4000, as with `isl` left out);
where it does not (`backend: null`), the wheel refuses it by its path. A field the wheel refuses
is left out of what the mapping reads (`ReadRequest.spec`), so that the problems found after it (config/dgdr.py)
are said in the same pass.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from pydantic import BaseModel, ValidationError

from spica_lib.base.dynamo_env import prepare_dynamo_import
from spica_lib.config.dgdr_features import planner_key_problems
from spica_lib.config.input_kind import DGDR_KIND
from spica_lib.config.k8s_metadata import metadata_problems
from spica_lib.config.origins import holds
from spica_lib.config.strict import problems_from

DGDR_API_VERSION = "nvidia.com/v1beta1"
TOP_KEYS = ("apiVersion", "kind", "metadata", "spec")


@dataclass
class ReadRequest:
    """A request as read: its problems, and what the mapping reads (None when nothing can be mapped)."""

    problems: list[tuple[str, str]]
    spec: dict[str, Any] | None = None  # the spec without the nulls the wheel took and the fields it refused
    typed: Any = None  # that spec as the wheel's `DynamoGraphDeploymentRequestSpec`, its defaults filled in
    said: list[str] = field(default_factory=list)  # paths already refused: nothing found inside them is said again


def read_request(data: dict[str, Any]) -> ReadRequest:
    """The request's problems by Spica's check and the wheel's, and the part of its spec that can be mapped."""
    problems = document_problems(data)
    spec = data.get("spec")
    if not isinstance(spec, dict):
        return ReadRequest(problems)
    refused = _wheel_problems({"spec": spec})
    given = _without_nulls(spec, refused)
    problems += key_problems(given) + refused
    said = [path for path, _ in problems]
    readable = _without(given, [path for path, _ in refused])
    try:
        typed = wheel_request({"spec": readable}).spec
    except ValidationError:  # a required field refused (the model): there is nothing to map
        return ReadRequest(problems, said=said)
    return ReadRequest(problems, readable, typed, said)


def request_problems(data: dict[str, Any], status: bool = False) -> list[tuple[str, str]]:
    """Spica's strict check of a DGDR document, then the wheel's types; (DGDR path, message) pairs."""
    found = document_problems(data, status)
    spec = data.get("spec")
    if not isinstance(spec, dict):
        return found
    refused = _wheel_problems({"spec": spec, **({"status": data.get("status")} if status else {})})
    found += key_problems(_without_nulls(spec, refused))
    if status and isinstance(data.get("status"), dict):
        found += _unknown_keys(data["status"], wheel_types().DynamoGraphDeploymentRequestStatus, "status")
    return found + refused


def document_problems(data: dict[str, Any], status: bool = False) -> list[tuple[str, str]]:
    """Spica's own check of a DGDR document's frame: its version, kind, top keys, metadata and `spec` present."""
    found: list[tuple[str, str]] = []
    if data.get("apiVersion") != DGDR_API_VERSION:
        found.append(("apiVersion", f"{data.get('apiVersion')!r}; Spica reads {DGDR_API_VERSION!r}, the DGDR "
                      "version of the pinned ai-dynamo"))  # fmt: skip
    if data.get("kind") != DGDR_KIND:
        found.append(("kind", f"{data.get('kind')!r}; allowed: {DGDR_KIND!r}"))
    allowed = (*TOP_KEYS, "status") if status else TOP_KEYS
    for key in data:
        if key == "status" and not status:
            found.append(("status", "Spica writes the status (deploy/dgdr.yaml); leave it out of the request"))
        elif key not in allowed:
            found.append((key, f"unknown key; allowed keys here: {list(allowed)}"))
    found += metadata_problems(data.get("metadata"))
    if not isinstance(data.get("spec"), dict):
        what = "missing" if "spec" not in data else f"{data['spec']!r}"
        found.append(("spec", f"required: the request (model, hardware, workload, sla ...), a mapping; got {what}"))
    return found


def key_problems(spec: dict[str, Any]) -> list[tuple[str, str]]:
    """Every key of the spec the wheel's models would drop silently, and every planner key Spica does not read."""
    types = wheel_types()
    found = _unknown_keys(spec, types.DynamoGraphDeploymentRequestSpec, "spec")
    features = spec.get("features") if isinstance(spec.get("features"), dict) else {}
    return found + planner_key_problems(features.get("planner"), set(types.PlannerConfig.model_fields))


def _wheel_problems(document: dict[str, Any]) -> list[tuple[str, str]]:
    try:
        wheel_request(document)
    except ValidationError as exc:
        return problems_from(exc)
    return []


def wheel_request(document: dict[str, Any]) -> Any:
    """The document as the wheel's `DynamoGraphDeploymentRequest` (its spec and status only)."""
    return wheel_types().DynamoGraphDeploymentRequest.model_validate(document)


def wheel_types() -> Any:
    """The pinned wheel's DGDR types module."""
    prepare_dynamo_import()
    from dynamo.profiler.utils import dgdr_v1beta1_types

    return dgdr_v1beta1_types


def wheel_value(value: Any) -> Any:
    """A value of the wheel's types as plain data: an enum member's value, a string default as it is."""
    return value.value if isinstance(value, Enum) else value


def _without_nulls(spec: dict[str, Any], refused: list[tuple[str, str]]) -> dict[str, Any]:
    """The spec without each null the wheel took (not inside a field it refused): a null the wheel takes is the
    field's default, as the key left out is. Nested models are walked; free maps (`overrides.dgd`) kept as written."""
    kept = [path for path, _ in refused]
    return _nulls_dropped(spec, wheel_types().DynamoGraphDeploymentRequestSpec, "spec", kept)


def _nulls_dropped(data: Any, model: type[BaseModel], where: str, kept: list[str]) -> Any:
    if not isinstance(data, dict):
        return data
    fields = {field.alias or name: field for name, field in model.model_fields.items()}
    out = {}
    for key, value in data.items():
        path, known = f"{where}.{key}", fields.get(key)
        if known is not None and value is None and not any(holds(outer, path) for outer in kept):
            continue
        inner = _model_in(known.annotation) if known is not None else None
        out[key] = _nulls_dropped(value, inner, path, kept) if inner is not None else value
    return out


def _without(spec: dict[str, Any], paths: list[str]) -> dict[str, Any]:
    """The spec without the fields at `paths` (DGDR paths under `spec.`), each left to the wheel's default."""
    out = spec
    for path in paths:
        keys = path.split("[")[0].split(".")[1:]  # an item of a list: the whole field
        if not keys or not holds("spec", path):
            continue
        out = _dropped(out, keys)
    return out


def _dropped(data: dict[str, Any], keys: list[str]) -> dict[str, Any]:
    if not isinstance(data, dict) or keys[0] not in data:
        return data
    if len(keys) == 1:
        return {key: value for key, value in data.items() if key != keys[0]}
    return {**data, keys[0]: _dropped(data[keys[0]], keys[1:])}


def _unknown_keys(data: Any, model: type[BaseModel], where: str) -> list[tuple[str, str]]:
    """Every key the wheel's model would drop silently, by its path (nested models walked; free maps not)."""
    if not isinstance(data, dict):
        return []  # the wheel's types say what the value should be
    fields = {name: field for name, field in model.model_fields.items()}
    fields.update({field.alias: field for field in model.model_fields.values() if field.alias})
    found = []
    for key, value in data.items():
        known = fields.get(key)
        if known is None:
            found.append((f"{where}.{key}", f"unknown key; allowed keys here: {list(model.model_fields)}"))
            continue
        inner = _model_in(known.annotation)
        if inner is not None and inner.__name__ != "PlannerConfig":  # the planner's keys: config/dgdr_features.py
            found += _unknown_keys(value, inner, f"{where}.{key}")
    return found


def _model_in(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    return next((m for m in map(_model_in, getattr(annotation, "__args__", ())) if m is not None), None)
