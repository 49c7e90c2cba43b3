"""What aiconfigurator knows: which GPU systems have a perf DB for which backend, and which models.

Checked at validation time so a typo in `hardware_sku` or `model_name` fails in a second, before
any compute, with the list of what is available. Everything here reads aiconfigurator's bundled
files only (no network, no perf-DB loading).
"""

from __future__ import annotations

import functools
import json
import os
from importlib import metadata
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from spica_lib.base.artifacts import atomic_write_text, sha256_of

VERSION_SLOT = "current"  # aiconfigurator's default perf-DB slot; resolved to a literal version


class CatalogFacts(BaseModel):
    """Resolved catalog facts recorded with a run: the perf-DB version used for each backend."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    hardware_sku: str
    model_name: str
    model_source: str  # "aiconfigurator" (bundled config) or "local" (a directory with config.json)
    perf_db_versions: dict[str, str | None]  # backend -> literal version, None when there is no DB


CACHE_VARIABLE = "SPICA_CATALOG_CACHE"  # where the index below is kept (default ~/.cache/spica/catalog)


@functools.cache
def supported_databases() -> dict[str, dict[str, list[str]]]:
    """{system: {backend: [versions]}} for every system that has perf data.

    aiconfigurator builds it by parsing every system's files (a second or more, in every process that
    validates a config), and it answers the same for the same installed aiconfigurator-core: so it is kept
    on disk by that package's version and install record (the hash of every file it installed) and its
    systems folders, written atomically; an index that cannot be read is built again. Systems folders
    outside the package (added at run time) are not kept: they are read each time.
    """
    from aiconfigurator_core.sdk import perf_database

    path = _index_path(perf_database.get_systems_paths())
    if path is not None:
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            pass
    found = {
        system: {b: list(v) for b, v in backends.items()}
        for system, backends in perf_database.get_supported_databases().items()
    }
    if path is not None:
        atomic_write_text(path, json.dumps(found))  # in its own order: a read gives back the same
    return found


def _index_path(systems_paths: list[str]) -> Path | None:
    """Where the installed package's index is kept, or None when a systems folder is not the package's."""
    try:
        package = metadata.distribution("aiconfigurator-core")
    except metadata.PackageNotFoundError:
        return None
    root = Path(str(package.locate_file(""))).resolve()
    if not all(Path(p).resolve().is_relative_to(root) for p in systems_paths):
        return None
    record = package.read_text("RECORD") or ""
    key = sha256_of({"version": package.version, "record": sha256_of(record), "systems": sorted(systems_paths)})
    folder = Path(os.environ.get(CACHE_VARIABLE) or Path(os.path.expanduser("~")) / ".cache" / "spica" / "catalog")
    return folder / f"{key}.json"


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
            problems.append(
                ("search_space.hardware", f"{sku!r} has no aiconfigurator perf data; known systems: {known}")
            )
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
