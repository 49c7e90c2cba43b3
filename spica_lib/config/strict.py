"""Shared pieces of the config models: the strict base model and errors written for people.

Every problem in a config is reported as `field.path: what is wrong (got VALUE)`, so a user can find
the line to change without reading a traceback.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError
from pydantic_core import InitErrorDetails, PydanticCustomError


class StrictModel(BaseModel):
    """Base of every config model: unknown keys are errors, values are checked on assignment too."""

    # allow_inf_nan=False: a YAML .nan or .inf is refused here, not when the config is serialised later.
    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)


class ConfigError(ValueError):
    """A config that cannot be run. `problems` holds one `(field path, message)` per problem."""

    def __init__(self, problems: list[tuple[str, str]], source: str | None = None, subject: str = "config"):
        self.problems = problems
        self.source = source
        self.subject = subject
        super().__init__(self._render())

    def _render(self) -> str:
        head = f"invalid {self.subject} {self.source}" if self.source else f"invalid {self.subject}"
        lines = [f"{head}: {len(self.problems)} problem(s)"]
        lines += [f"  - {path}: {message}" if path else f"  - {message}" for path, message in self.problems]
        return "\n".join(lines)


def _short(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _path(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def _message(error: dict[str, Any], allowed_keys: list[str] | None) -> str:
    kind = error["type"]
    if kind == "extra_forbidden":
        hint = f"; allowed keys here: {allowed_keys}" if allowed_keys else ""
        return f"unknown key{hint}"
    if kind == "missing":
        return "required field is missing"
    message = error["msg"]
    for prefix in ("Value error, ", "Assertion failed, "):
        if message.startswith(prefix):
            message = message[len(prefix) :]
    if kind == "value_error":
        return message  # our own validators already name the value
    value = error.get("input")
    if isinstance(value, dict | list) and len(repr(value)) > 80:
        return message
    return f"{message} (got {_short(value)})"


def problems_from(exc: ValidationError, root: type[BaseModel] | None = None) -> list[tuple[str, str]]:
    """Turn pydantic's errors into `(field path, message)` pairs in the user's vocabulary."""
    found = []
    for error in exc.errors(include_url=False):
        loc = tuple(part for part in error["loc"] if not _is_union_tag(part))
        allowed = _allowed_keys(root, loc[:-1]) if root is not None and error["type"] == "extra_forbidden" else None
        member = next((part for part in error["loc"] if _is_union_tag(part)), None)
        found.append((_path(loc), _message(error, allowed), member))
    # A number field is a union of int and float: a NaN or a null fails both members, and the int member's
    # "valid integer" is the misleading half. One message per problem: the other member's.
    union_paths = [path for path, _, member in found if member is not None]
    return [
        (path, message)
        for path, message, member in found
        if not (member == "int" and union_paths.count(path) > 1)
    ]


def several_problems(title: str, problems: list[tuple[str, str, Any]]) -> ValidationError:
    """One error carrying several problems, each at its own field: `(field, message, value)`, "" for the model.

    A validator that raises it reports every problem it found in one pass (pydantic puts the model's own path
    in front of each field), where a ValueError would stop at the first and name only the model."""
    details = [
        InitErrorDetails(
            type=PydanticCustomError("value_error", "{message}", {"message": message}),
            loc=(field,) if field else (),
            input=value,
        )
        for field, message, value in problems
    ]
    return ValidationError.from_exception_data(title, details)


def first_error(exc: ValidationError) -> str:
    """One-line summary of the first problem in a nested validation (used inside other validators)."""
    path, message = problems_from(exc)[0]
    return f"{path}: {message}" if path else message


def _is_union_tag(part: Any) -> bool:
    # pydantic adds the union member's type name to the location (e.g. 'int', 'dict[str,any]').
    return isinstance(part, str) and (part in {"str", "int", "float", "bool"} or "[" in part)


def _allowed_keys(root: type[BaseModel], loc: tuple[Any, ...]) -> list[str] | None:
    model: Any = root
    for part in loc:
        if isinstance(part, int):
            continue
        field = getattr(model, "model_fields", {}).get(part)
        if field is None:
            return None
        model = _model_in(field.annotation)
        if model is None:
            return None
    return list(model.model_fields)


def _model_in(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()):
        found = _model_in(arg)
        if found is not None:
            return found
    return None
