"""The pilot's settings, from the profile's `set-resources: replay:` block (execution only: no run identity).

    pilots: 8                   pilot jobs at once (0: none; every replay job is its own SLURM job)
    pilot_idle_seconds: 60      a pilot with nothing to run for this long ends (frees its node between rounds)
    pilot_minutes: 120          each pilot job's SLURM time limit; it takes no job that would outlast it
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

EXECUTOR = "slurm"
SPOOL_VARIABLE = "SPICA_PILOT_SPOOL"  # set by the keeper's launcher; the rule scripts hand their jobs to it


class PilotSettingsError(ValueError):
    """A pilot setting that cannot work (the Snakefile stops on it before any job runs)."""


class PilotSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    pilots: int = 0
    idle_seconds: float = 60.0
    minutes: int = 120

    @property
    def on(self) -> bool:
        return self.pilots > 0


FIELDS = {"pilots": "pilots", "pilot_idle_seconds": "idle_seconds", "pilot_minutes": "minutes"}


def pilot_settings(replay_resources: dict[str, Any]) -> PilotSettings:
    """The settings among `set-resources: replay:`; a bad value is refused, naming it and what is allowed."""
    values = {}
    for name, field in FIELDS.items():
        if name not in replay_resources:
            continue
        value = getattr(replay_resources[name], "value", replay_resources[name])  # Snakemake wraps a profile's values
        minimum = 0 if name == "pilots" else 1
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise PilotSettingsError(f"set-resources replay:{name} must be a whole number >= {minimum}, got {value!r}")
        values[field] = value
    settings = PilotSettings(**values)
    if not settings.on and len(values) > ("pilots" in values):
        extra = sorted(name for name in FIELDS if name != "pilots" and name in replay_resources)
        raise PilotSettingsError(f"set-resources replay:{', '.join(extra)} does nothing without replay:pilots >= 1")
    return settings


def check_executor(settings: PilotSettings, executor: str | None) -> None:
    """Pilots are SLURM jobs: asked for under another executor they would do nothing, so that is an error."""
    if settings.on and executor != EXECUTOR:
        raise PilotSettingsError(
            f"set-resources replay:pilots={settings.pilots} needs the {EXECUTOR} executor "
            f"(this run uses {executor or 'local'}); drop it or run with --profile profiles/slurm"
        )
