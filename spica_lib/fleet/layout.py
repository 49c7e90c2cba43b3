"""Where a fleet run lives: `results/<fleet>/`, each model's sweep a run of the existing layout under it.

    results/<fleet>/fleet_config.json      the checked fleet (FleetRecord)
    results/<fleet>/models/<model>.yaml    the model's single-sweep config
    results/<fleet>/models/<model>/        the model's run (run/layout.py's RunFiles), swept with its
                                           working folder results/<fleet>/ and root models/
    results/<fleet>/models/<model>.done.json   the sweep finished (ModelSweepDone)
    results/<fleet>/confirm/<model>/<key>x<replicas>.json   a chosen deployment's confirming replays
    results/<fleet>/journal/                each confirming replay as it ends (RunFiles.journal)
    results/<fleet>/fleet.json             the split (fleet/plan.py's FleetPlan)
    results/<fleet>/report.md, deploy/<model>/<rank>/

The fleet workflow calls `prepare_fleet` while it is parsed, so a bad fleet config stops it before any job.
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from spica_lib.base.artifacts import sha256_of
from spica_lib.config import ConfigError
from spica_lib.config.validate import RUN_ID_LENGTH, check_run_name, config_sha256
from spica_lib.fleet.config import FleetConfig, FleetModelPlan, load_fleet_config
from spica_lib.run.layout import RESULTS_ROOT, RunFiles

MODELS = "models"  # the model sweeps' root, inside the fleet's folder


class FleetRecord(BaseModel):
    """Artifact `fleet_config.json`: the checked fleet, its id, and each model's config hash."""

    model_config = ConfigDict(extra="forbid")

    run: str
    fleet_sha256: str
    config_file: str
    fleet: FleetConfig
    model_sha256: dict[str, str]  # model -> its single-sweep config's hash (its run's id)
    headroom: dict[str, float]  # model -> required headroom
    offered_rps: dict[str, float]  # model -> its workload's arrival rate


class ModelSweepDone(BaseModel):
    """Artifact `models/<model>.done.json`: the model's sweep finished (its run folder holds the rest)."""

    model_config = ConfigDict(extra="forbid")

    model: str
    run_dir: str
    config_sha256: str


class FleetFiles(RunFiles):
    """The results tree of one fleet run: the fleet's own paths are spelled here and nowhere else; the ones it
    shares with a run (its logs, its deploy/ folder, the journal of its confirming replays) are RunFiles'."""

    models: list[str] = []

    @property
    def record_json(self) -> str:
        return f"{self.dir}/fleet_config.json"

    def model_config_yaml(self, model: str) -> str:
        return f"{self.dir}/{MODELS}/{model}.yaml"

    def model_run(self, model: str) -> RunFiles:
        """The model's run, by its path from the repository (its sweep runs in `dir` with root `models`)."""
        return RunFiles(dir=f"{self.dir}/{MODELS}/{model}")

    def model_done(self, model: str) -> str:
        return f"{self.dir}/{MODELS}/{model}.done.json"

    def confirmation(self, model: str, key: str, replicas: int) -> str:
        """A chosen deployment's confirming replays (fleet/plan.py's ConfirmOutcome), kept so a rerun plan reuses them."""
        return f"{self.dir}/confirm/{model}/{key}x{replicas}.json"

    @property
    def fleet_json(self) -> str:
        return f"{self.dir}/fleet.json"

    @property
    def report_md(self) -> str:
        return f"{self.dir}/report.md"

    def model_deployment(self, model: str) -> str:
        """A model's deployment files: `deploy/<model>/<rank>/`."""
        return f"{self.deploy_dir}/{model}"


def build_fleet_record(config_file: str | Path, run: str | None = None) -> tuple[FleetRecord, list[FleetModelPlan]]:
    fleet, plans = load_fleet_config(config_file)
    model_sha = {plan.name: config_sha256(plan.config) for plan in plans}
    digest = sha256_of({"fleet": fleet.model_dump(mode="json"), "models": model_sha})
    record = FleetRecord(
        run=check_run_name(run) if run else digest[:RUN_ID_LENGTH],
        fleet_sha256=digest,
        config_file=str(Path(config_file).resolve()),
        fleet=fleet,
        model_sha256=model_sha,
        headroom={plan.name: plan.headroom for plan in plans},
        offered_rps={plan.name: plan.offered_rps for plan in plans},
    )
    return record, plans


def prepare_fleet(
    config_file: str, run: str | None = None, root: str = RESULTS_ROOT
) -> tuple[FleetRecord, FleetFiles, list[FleetModelPlan]]:
    """Check the fleet config and name its run; refuse to mix a different fleet into an existing folder."""
    record, plans = build_fleet_record(config_file, run)
    files = FleetFiles(dir=f"{root}/{record.run}", models=[m.name for m in record.fleet.models])
    existing = Path(files.record_json)
    if existing.is_file():
        recorded = json.loads(existing.read_text(encoding="utf-8")).get("fleet_sha256", "")
        if recorded != record.fleet_sha256:
            raise ConfigError(
                [("run", f"{files.dir} already holds a fleet run of a different config (sha256 {recorded[:12]}); "
                         "pick another run name, or drop `run=` to use the config's own id")],  # fmt: skip
                source=config_file,
                subject="fleet config",
            )
    return record, files, plans
