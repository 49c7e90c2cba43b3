"""`spica fleet CONFIG`: start (or resume) a fleet run with Snakemake (workflow/fleet.smk), as `spica run` does a sweep."""

from __future__ import annotations

import sys
from pathlib import Path

from spica_lib.run.launcher import SNAKEFILE, clear_stale_lock, run_forwarding_signals

FLEET_SNAKEFILE = SNAKEFILE.parent / "fleet.smk"


def fleet_snakemake_command(
    config: str, cores: int | None, profile: str | None, run: str | None, extra: list[str]
) -> list[str]:
    """The fleet's Snakemake command; `profile` goes to each model's sweep (the fleet's own jobs only wait or plan)."""
    command = [sys.executable, "-m", "snakemake", "--snakefile", str(FLEET_SNAKEFILE), "--rerun-incomplete"]
    if cores is not None:
        command += ["--cores", str(cores)]
    command += extra
    command += ["--config", f"fleet={config}"] + ([f"run={run}"] if run else [])
    if profile:
        command.append(f"sweep_profile={Path(profile).resolve()}")
    return command


def run_fleet(
    config: str, cores: int | None = 2, profile: str | None = None, run: str | None = None,
    extra: list[str] | None = None,
) -> int:  # fmt: skip
    command = fleet_snakemake_command(config, cores, profile, run, list(extra or []))
    problem = clear_stale_lock(Path.cwd().resolve(), command)
    if problem:
        print(problem, file=sys.stderr)
        return 1
    return run_forwarding_signals(command)
