"""The fleet workflow's job bodies (workflow/fleet.smk): set up, sweep one model, plan, report.

The plan's confirming replays go through the trial store as every replay of a run does: each is
journaled in the fleet's folder as it ends (a killed plan job resumes without replaying it), and the
plan job is declared in spica_lib/host/registry.py (its cores, memory, and who runs it).

Each model's sweep is the single-model workflow, unchanged, run by its own Snakemake in the fleet's
folder with root `models/`: so it resumes where it stopped, takes the same profile (SLURM) and leaves
the same per-trial files. The fleet's job only waits for it and marks it done.
"""

from __future__ import annotations

import sys
from pathlib import Path

from spica_lib.base.artifacts import read_model, write_model
from spica_lib.base.logs import stage_log
from spica_lib.fleet.candidates import model_candidates
from spica_lib.fleet.config import FleetModelPlan, write_model_config
from spica_lib.fleet.layout import MODELS, FleetFiles, FleetRecord, ModelSweepDone
from spica_lib.fleet.plan import ConfirmOutcome, FleetPlan, plan_fleet
from spica_lib.fleet.split import SplitChoice, SplitDemand
from spica_lib.results.capacity import CONFIRM_SAMPLES, at_load
from spica_lib.run.job_args import JobArgs
from spica_lib.run.launcher import clear_stale_lock, run_forwarding_signals, snakemake_command
from spica_lib.run.run_screen import appended_log, failure_text

# Fresh samples of the confirming replays: past the finish's and the capacity bisection's (0, 1, 2, ...).
CONFIRM_SAMPLE_OFFSET = 1000


def write_setup(record: FleetRecord, files: FleetFiles, plans: list[FleetModelPlan]) -> None:
    """`fleet_config.json` and each model's single-sweep config."""
    for plan in plans:
        write_model_config(plan.config, files.model_config_yaml(plan.name))
    write_model(files.record_json, record)


def sweep_model(files: FleetFiles, model: str, cores: int | None, profile: str | None) -> None:
    """Run (or resume) one model's sweep; raises when it fails (the fleet cannot be planned without it).

    Run in a process of its own (`python -m spica_lib.fleet.jobs`, the rule's shell line): stopping the
    fleet's Snakemake stops it, and it passes the signal on to the model's Snakemake.
    """
    folder = Path(files.dir).resolve()
    config = str(Path(files.model_config_yaml(model)).resolve())
    command = snakemake_command(config, cores, profile, run=model, extra=[], root=MODELS)
    problem = clear_stale_lock(folder, command)
    if problem:
        raise RuntimeError(f"model {model}: {problem}")
    run = files.model_run(model)
    log = Path(run.snakemake_log)
    print(f"model {model}: sweeping in {run.dir}; its Snakemake's log is {log}", file=sys.stderr)
    # Its own log, as `spica run` keeps one: the fleet's log (and screen) stays the fleet's.
    with appended_log(log, f"spica fleet, model {model}") as (written, start):
        code = run_forwarding_signals(command, cwd=folder, output=written)
    if code != 0:
        raise RuntimeError(failure_text(log, code, start, f"model {model}'s sweep"))
    sha = read_model(run.config_json, _validated()).config_sha256
    write_model(files.model_done(model), ModelSweepDone(model=model, run_dir=run.dir, config_sha256=sha))


def _validated():  # noqa: ANN202 (the import is heavy; only the sweep's end needs it)
    from spica_lib.config.validate import ValidatedConfig

    return ValidatedConfig


def demands_of(record: FleetRecord, files: FleetFiles) -> tuple[list[SplitDemand], dict[str, str]]:
    """Each model's demand and candidates, from its finished run (key -> where its capacity comes from)."""
    demands, sources = [], {}
    for model in record.fleet.models:
        candidates, source = model_candidates(files.model_run(model.name).dir, record.fleet.gpu_hour_usd)
        sources.update(source)
        demands.append(
            SplitDemand(
                name=model.name,
                offered_rps=record.offered_rps[model.name],
                headroom=record.headroom[model.name],
                candidates=candidates,
            )
        )
    return demands, sources


def replay_confirmer(files: FleetFiles, parallel: int, log):  # noqa: ANN001, ANN201
    """The confirming replays: one replica of the chosen deployment at its share, on fresh samples."""
    from spica_lib.run.view import RunView
    from spica_lib.trial.store import run_replay_job

    def confirm(model: str, choice: SplitChoice, rate: float) -> ConfirmOutcome:
        kept = Path(files.confirmation(model, choice.candidate.key, choice.replicas))
        if kept.is_file():  # replayed before this plan job was stopped: the same replays, the same outcome
            outcome = read_model(kept, ConfirmOutcome)
            if outcome.rate_rps == rate:
                return outcome
        outcome = replay(model, choice, rate)
        write_model(kept, outcome)
        return outcome

    def replay(model: str, choice: SplitChoice, rate: float) -> ConfirmOutcome:
        view = RunView(files.model_run(model).dir)
        config, spec = view.config, view.records[choice.candidate.key].spec
        factor = rate / float(view.capacity.offered_rps)
        loaded = at_load(config, spec, factor)
        specs = {
            f"{choice.candidate.key}^{factor:g}~{i}": loaded.on_fresh_sample(CONFIRM_SAMPLE_OFFSET + i)
            for i in range(CONFIRM_SAMPLES)
        }
        records = run_replay_job(
            specs, files.journal, files.started, 1, 1, max_eval_seconds=config.sweep.max_eval_seconds, parallel=parallel
        )
        results = {record.key: record.result for record, _ in records}
        met = sum(r.status == "feasible" for r in results.values())
        reasons = [f"{r.status}: {r.reason}" for r in results.values() if r.status != "feasible"]
        log.info("%s %s x%d at %.3g req/s per replica: %d of %d within the SLA", model, choice.candidate.label,
                 choice.replicas, rate, met, len(results))  # fmt: skip
        return ConfirmOutcome(rate_rps=rate, samples=len(results), met=met, reasons=reasons)

    return confirm


def plan(job: JobArgs) -> FleetPlan:
    """Rule `fleet_plan`: the split, confirmed by replays -> fleet.json."""
    files, parallel = FleetFiles(dir=job.params["fleet_dir"]), job.threads
    record = read_model(files.record_json, FleetRecord)
    with stage_log(job.log[0]) as log:
        demands, sources = demands_of(record, files)
        for demand in demands:
            log.info("%s: %.3g req/s, %d candidate(s)", demand.name, demand.offered_rps, len(demand.candidates))
        result = plan_fleet(record.run, demands, record.fleet.inventory, record.fleet.goal,
                            replay_confirmer(files, parallel, log), sources)  # fmt: skip
        write_model(files.fleet_json, result)
        log.info("fleet.json: %s", "a plan" if result.feasible else f"no plan: {result.message}")
    return result


def main(argv: list[str] | None = None) -> int:
    """`python -m spica_lib.fleet.jobs FLEET_DIR MODEL --cores N [--profile P]`: one model's sweep."""
    import argparse

    parser = argparse.ArgumentParser(prog="spica_lib.fleet.jobs", description=main.__doc__)
    parser.add_argument("fleet_dir")
    parser.add_argument("model")
    parser.add_argument("--cores", type=int, default=None)
    parser.add_argument("--profile", default=None)
    args = parser.parse_args(argv)
    try:
        sweep_model(FleetFiles(dir=args.fleet_dir), args.model, args.cores, args.profile)
    except RuntimeError as error:
        print(error, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
