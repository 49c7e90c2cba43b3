"""Artifact `manifest.json`: what produced a run — tool versions, perf DBs, input hashes, seed, host, times.

Every trial file carries its own versions; the manifest is the run's, written when the report is.
"""

from __future__ import annotations

import datetime
import hashlib
import platform
import subprocess
from importlib import metadata
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from spica_lib.base.versions import package_versions
from spica_lib.config import SmartSearchConfig
from spica_lib.config.calibration import Calibration
from spica_lib.config.validate import ValidatedConfig

SCHEMA_VERSION = 1
EXTRA_PACKAGES = ("aiconfigurator",)  # the CLI package, next to aiconfigurator-core, when installed
REPO = Path(__file__).resolve().parents[2]


class RunManifest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    schema_version: int = SCHEMA_VERSION
    run: str
    spica_commit: str | None  # None when Spica is not run from a git checkout
    versions: dict[str, str]
    perf_db_versions: dict[str, str | None]
    sha256: dict[str, str | None]  # config (file as written), config_normalised, trace, lock, model_config
    seed: int
    gpu_hour_usd: float | None  # the price per GPU-hour used for the run's hardware SKU, if any
    gpu_hour_usd_by_sku: dict[str, float] | None = None  # an inventory of several GPU types: each one's price
    host: str
    started_at: str  # when the run's config.json was written (its first start)
    finished_at: str  # when this manifest was written
    # An opted-in step-time calibration: its file, source and scales per backend (None: the perf DB as is).
    calibration: Calibration | None = None


def build_manifest(validated: ValidatedConfig, config_json: str | Path) -> RunManifest:
    config = validated.config
    versions = dict(package_versions())
    for name in EXTRA_PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "not installed"
    model_dir = Path(config.search_space.model_name)
    return RunManifest(
        run=validated.run,
        spica_commit=git_commit(),
        versions=versions,
        perf_db_versions=dict(validated.catalog.perf_db_versions) if validated.catalog else {},
        sha256={
            "config": file_sha256(validated.inputs.config_file),
            "config_normalised": validated.config_sha256,
            "trace": validated.inputs.trace_sha256,
            "lock": file_sha256(REPO / "requirements" / "lock.txt"),
            "model_config": file_sha256(model_dir / "config.json") if model_dir.is_dir() else None,
            "calibration": file_sha256(config.calibration.file) if _is_file(config.calibration) else None,
        },
        calibration=config.calibration,
        seed=config.sweep.seed,
        gpu_hour_usd=config.goal.gpu_hour_price(config.search_space.hardware_sku),
        gpu_hour_usd_by_sku=_fleet_prices(config),
        host=platform.node(),
        started_at=_iso(Path(config_json).stat().st_mtime),
        finished_at=_iso(datetime.datetime.now(datetime.UTC).timestamp()),
    )


def _fleet_prices(config: SmartSearchConfig) -> dict[str, float] | None:
    space, goal = config.search_space, config.goal
    if not space.has_gpu_inventory or goal.gpu_hour_usd is None:
        return None
    return {sku: goal.gpu_hour_price(sku) for sku in space.inventory()}


def file_sha256(path: str | Path) -> str | None:
    """The file's SHA-256, or None when it is not there (an installed Spica has no lock file beside it)."""
    path = Path(path)
    if not path.is_file():
        return None
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def git_commit() -> str | None:
    try:
        done = subprocess.run(
            ["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() or None if done.returncode == 0 else None


def _iso(timestamp: float) -> str:
    return datetime.datetime.fromtimestamp(timestamp, datetime.UTC).isoformat(timespec="seconds")


def _is_file(calibration: Calibration | None) -> bool:
    return calibration is not None and Path(calibration.file).is_file()
