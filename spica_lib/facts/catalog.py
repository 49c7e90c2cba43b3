"""What aiconfigurator knows: which GPU systems have a perf DB for which backend, and which models.

Checked at validation time so a typo in `hardware_sku` or `model_name` fails in a second, before
any compute, with the list of what is available. Everything here reads aiconfigurator's bundled
files only (no network, no perf-DB loading).
"""

from __future__ import annotations

import functools
from pathlib import Path

from pydantic import BaseModel, ConfigDict

VERSION_SLOT = "current"  # aiconfigurator's default perf-DB slot; resolved to a literal version


class CatalogFacts(BaseModel):
    """Resolved catalog facts recorded with a run: the perf-DB version used for each backend."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    hardware_sku: str
    model_name: str
    model_source: str  # "aiconfigurator" (bundled config) or "local" (a directory with config.json)
    perf_db_versions: dict[str, str | None]  # backend -> literal version, None when there is no DB


@functools.cache
def supported_databases() -> dict[str, dict[str, list[str]]]:
    """{system: {backend: [versions]}} for every system that has perf data."""
    from aiconfigurator_core.sdk import perf_database

    return perf_database.get_supported_databases()


@functools.cache
def resolve_backend_version(sku: str, backend: str) -> str | None:
    """The literal perf-DB version behind the `current` slot, or None if (sku, backend) has none."""
    from aiconfigurator_core.sdk import perf_database

    try:
        version = perf_database.resolve_query_version(sku, backend, VERSION_SLOT)
    except ValueError:
        return None
    return version if version in supported_databases().get(sku, {}).get(backend, []) else None


def versions_on(sku: str, backends: list[str] | dict[str, object]) -> dict[str, str | None]:
    """The literal perf-DB version of each backend on `sku` (None where it has none)."""
    return {backend: resolve_backend_version(sku, backend) for backend in backends}


@functools.cache
def bundled_models() -> tuple[str, ...]:
    """Hugging Face ids of the models aiconfigurator can describe offline, sorted.

    Its own list: its model folder also holds configs (Mixtral, Kimi-K2 in 0.12.0) that it would
    try to download at their first use, which fails on a machine without a hub.
    """
    from aiconfigurator_core.sdk.common import get_default_models

    return tuple(sorted(get_default_models()))


def model_source(model_name: str) -> str | None:
    if model_name in bundled_models():
        return "aiconfigurator"
    if (Path(model_name).expanduser() / "config.json").is_file():
        return "local"
    return None


def check_catalog(sku: str, model_name: str, backends: list[str]) -> tuple[CatalogFacts | None, list[tuple[str, str]]]:
    """Check the SKU and model against aiconfigurator; return the facts, or the problems found."""
    problems: list[tuple[str, str]] = []
    databases = supported_databases()
    versions = {backend: resolve_backend_version(sku, backend) for backend in backends}
    if sku not in databases:
        problems.append(
            (
                "search_space.hardware_sku",
                f"{sku!r} has no aiconfigurator perf data; known systems: {sorted(databases)}",
            )
        )
    elif not any(versions.values()):
        offered = {backend: resolve_backend_version(sku, backend) for backend in sorted(databases[sku])}
        usable = sorted(b for b, v in offered.items() if v)
        problems.append(
            (
                "search_space.backend",
                f"none of {backends} has a perf database on {sku!r}; backends with one there: {usable}",
            )
        )
    source = model_source(model_name)
    if source is None:
        problems.append(
            (
                "search_space.model_name",
                f"{model_name!r} is neither an aiconfigurator model nor a local directory with a config.json; "
                f"known models: {', '.join(bundled_models())}",
            )
        )
    if problems:
        return None, problems
    facts = CatalogFacts(hardware_sku=sku, model_name=model_name, model_source=source, perf_db_versions=versions)
    return facts, []


def check_inventory(inventory: dict[str, int], backends: list[str]) -> list[tuple[str, str]]:
    """Problems of an inventory of several GPU types: an unknown SKU, or one with no perf DB for a listed backend.

    Every SKU must serve every listed backend: a layout is searched on any SKU with any backend, and a
    backend that could run on only some of them would quietly search a smaller fleet.
    """
    databases = supported_databases()
    problems = []
    for sku in inventory:
        if sku not in databases:
            known = sorted(databases)
            problems.append(("search_space.hardware", f"{sku!r} has no aiconfigurator perf data; known systems: {known}"))
            continue
        missing = [backend for backend in dict.fromkeys(backends) if not resolve_backend_version(sku, backend)]
        if missing:
            problems.append(
                (
                    "search_space.hardware",
                    f"{sku!r} has no aiconfigurator perf database for backend(s) {missing}; remove the SKU "
                    "or the backend(s) from search_space.backend",
                )
            )
    return problems
