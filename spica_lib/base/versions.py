"""Versions of the parts a run depends on, recorded in its artifacts for reproducibility."""

from __future__ import annotations

import functools
import platform
from importlib import metadata

PACKAGES = (
    "spica",
    "ai-dynamo",
    "ai-dynamo-runtime",
    "aiconfigurator-core",
    "google-vizier",
    "jax",
    "snakemake",
    "pydantic",
)


@functools.cache
def _versions() -> tuple[tuple[str, str], ...]:
    out = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "not installed"
    return tuple(out.items())


def package_versions() -> dict[str, str]:
    """Installed versions, read once per process."""
    return dict(_versions())
