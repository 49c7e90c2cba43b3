"""A measured row's replay, kept on disk by what was replayed and the versions that replayed it.

A fidelity run replays hundreds of rows, each by several protocols, and a calibration fit replays the held-out
half again with its scales: minutes to hours on two cores. The same trial (its key hashes the deployment plan,
the engine settings, the traffic and the scales: trial/spec.py) replayed by the same Dynamo and aiconfigurator
gives the same result, so `spica fidelity --cache DIR` and the fidelity benches keep each row's replay as a
JSON file named by the SHA-256 of the trial key, those versions and this module's FORMAT. A replay that ran
out of time is not kept (the machine's load decided it, not its inputs); a file that cannot be read is replayed.
"""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from spica_lib.base.artifacts import sha256_of, write_model
from spica_lib.base.versions import package_versions
from spica_lib.fidelity.attribution import TtftParts

CACHE_VARIABLE = "SPICA_FIDELITY_CACHE"
FORMAT = 1  # what a kept replay holds (raise it when that changes: every older file is then replayed again)
REPLAY_PACKAGES = ("ai-dynamo", "ai-dynamo-runtime", "aiconfigurator-core")
KEPT_STATUSES = ("feasible", "infeasible", "failed", "unsupported")


class CachedReplay(BaseModel):
    """Artifact `<cache>/<sha256>.json`: one row's replay, as the check reads it."""

    model_config = ConfigDict(extra="forbid")

    trial_key: str
    versions: dict[str, str]
    status: str
    reason: str | None = None
    metrics: dict[str, float] = Field(default_factory=dict)
    parts: TtftParts | None = None
    ttft_after_opening_wave_ms: float | None = None


def default_cache_folder() -> Path:
    return Path(os.environ.get(CACHE_VARIABLE) or Path(os.path.expanduser("~")) / ".cache" / "spica" / "fidelity")


class ReplayCache:
    """Kept replays under `folder`."""

    def __init__(self, folder: str | Path | None = None) -> None:
        self.folder = Path(folder) if folder is not None else default_cache_folder()
        versions = package_versions()
        self.versions = {name: versions[name] for name in REPLAY_PACKAGES}

    def _path(self, trial_key: str) -> Path:
        return self.folder / f"{sha256_of({'trial': trial_key, 'versions': self.versions, 'format': FORMAT})}.json"

    def get(self, trial_key: str) -> CachedReplay | None:
        try:
            return CachedReplay.model_validate_json(self._path(trial_key).read_text(encoding="utf-8"))
        except (OSError, ValueError, ValidationError):
            return None

    def put(self, replay: CachedReplay) -> None:
        if replay.status in KEPT_STATUSES:
            self.folder.mkdir(parents=True, exist_ok=True)
            write_model(self._path(replay.trial_key), replay)
