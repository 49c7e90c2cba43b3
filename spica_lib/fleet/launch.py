"""`spica fleet CONFIG`: start (or resume) a fleet run with Snakemake (workflow/fleet.smk), as `spica run` does a sweep.

The screen gets what a person follows: the fleet's stages as they start (each model's sweep names its own log),
then the plan. Snakemake's records go to the fleet's `logs/snakemake.log`, each model sweep's to its own run's.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from spica_lib.config import ConfigError
from spica_lib.run.launcher import DRY_RUN_FLAGS, SNAKEFILE, SNAKEMAKE_MAIN, clear_stale_lock, run_forwarding_signals
from spica_lib.run.run_screen import Voice

FLEET_SNAKEFILE = SNAKEFILE.parent / "fleet.smk"
EXIT_CONFIG = 2
# The fleet's stages: the first words of its rules' messages (workflow/fleet.smk), shown as each starts.
FLEET_STAGES = ("Writing the fleet's", "Sweeping model ", "Splitting the inventory")


def fleet_snakemake_command(
    config: str, cores: int | None, profile: str | None, run: str | None, extra: list[str]
) -> list[str]:
    """The fleet's Snakemake command; `profile` goes to each model's sweep (the fleet's own jobs only wait or plan)."""
    command = [sys.executable, "-m", SNAKEMAKE_MAIN, "--snakefile", str(FLEET_SNAKEFILE), "--rerun-incomplete"]
    if cores is not None:
        command += ["--cores", str(cores)]
    command += extra
    command += ["--config", f"fleet={config}"] + ([f"run={run}"] if run else [])
    if profile:
        command.append(f"sweep_profile={Path(profile).resolve()}")
    return command


def run_fleet(
    config: str, cores: int | None = 2, profile: str | None = None, run: str | None = None,
    extra: list[str] | None = None, verbose: bool = False,
) -> int:  # fmt: skip
    """Run (or resume) the fleet; its stages and then its plan on the screen (its Snakemake log with `verbose`).
    A bad fleet config exits 2 before anything runs."""
    from spica_lib.fleet.layout import build_fleet_record
    from spica_lib.run.layout import RESULTS_ROOT
    from spica_lib.run.run_screen import run_on_screen

    try:  # the workflow checks it again while parsed; here the error is the user's, before Snakemake starts
        record, _ = build_fleet_record(config, run)
    except ConfigError as error:
        print(error, file=sys.stderr)
        return EXIT_CONFIG
    command = fleet_snakemake_command(config, cores, profile, run, list(extra or []))
    problem = clear_stale_lock(Path.cwd().resolve(), command)
    if problem:
        print(problem, file=sys.stderr)
        return 1
    if DRY_RUN_FLAGS & set(extra or []):
        return run_forwarding_signals(command)
    return run_on_screen(command, Path(RESULTS_ROOT, record.run), verbose, run_forwarding_signals, voice=FLEET_VOICE)


def _a_stage(line: str) -> str | None:
    """A stage's start, as Snakemake logs its rule's message ("Job 3: Sweeping model ..."), or None."""
    message = re.sub(r"^Job \d+: ", "", line)
    return message if message.startswith(FLEET_STAGES) else None


def fleet_answer(fleet_dir: Path) -> str | None:
    """The finished fleet's plan, model by model, and where its report and deployment files are."""
    from spica_lib.base.artifacts import read_model
    from spica_lib.fleet.layout import FleetFiles
    from spica_lib.fleet.plan import FleetPlan

    files = FleetFiles(dir=str(fleet_dir))
    if not Path(files.fleet_json).is_file():
        return None
    plan = read_model(files.fleet_json, FleetPlan)
    if not plan.feasible:
        return f"spica fleet: no plan: {plan.message}"
    used = {sku: sum(d.gpus.get(sku, 0) for d in plan.deployments) for sku in plan.inventory}
    gpus = ", ".join(f"{used[sku]}/{count} {sku}" for sku, count in plan.inventory.items())
    lines = [f"spica fleet done: {len(plan.deployments)} model(s) on {gpus} GPUs (used/inventory)"]
    for d in plan.deployments:
        lines.append(
            f"  {d.model}: {d.replicas} x {d.label}, capacity {d.capacity_rps:.3g} req/s for {d.offered_rps:.3g} "
            f"offered (headroom {d.headroom:+.0%}, {d.required_headroom:.0%} required)"
        )
    lines.append(f"report: {files.report_md}")
    lines.append(f"deployment files: {files.deploy_dir}/")
    return "\n".join(lines)


FLEET_VOICE = Voice(command="spica fleet", view=False, says=_a_stage, answer=fleet_answer)
