"""Fields added after files were first written: left out of a dump while they hold the value that means "as before".

Run ids, trial keys and config hashes are hashes of dumped models. A field added later must not change the hash of
anything that does not use it, so its serializer drops it while it holds its "as before" value.
"""

from __future__ import annotations

from typing import Any


def without_defaults(data: dict[str, Any], model: Any, **before: Any) -> dict[str, Any]:
    """`data` (a dump of `model`) without each named field whose value on `model` is its "as before" value."""
    for name, value in before.items():
        if getattr(model, name) == value:
            data.pop(name, None)
    return data
