"""Where a run lives: its id, its folder under `results/`, and the path of every artifact in it.

The Snakefile calls `prepare_run` while it is parsed, so a bad config stops the workflow before a
single job starts or a single file is written.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from spica_lib.config import ConfigError
from spica_lib.config.policies import apply_policy_filters
from spica_lib.config.validate import ValidatedConfig, build_validated_config
from spica_lib.pools.branches import NoViableParallelConfig, enumerate_branches
from spica_lib.predictor.plan import plan_predictor_jobs
from spica_lib.results.capacity import MAX_REPLAYS as CAPACITY_REPLAYS
from spica_lib.results.sequential import most_finish_replays
from spica_lib.run.job_memory import largest_input_tokens, replay_mb, search_input_tokens

RESULTS_ROOT = "results"
DEFAULT_CONFIG = "config/default.yaml"


def deployment_folder(deploy_dir: str | Path, rank: int) -> str:
    """`deploy/<rank>/` inside any deploy folder (a run's, or one the deploy files are written to by hand)."""
    return f"{deploy_dir}/{rank}"


class RunFiles(BaseModel):
    """The results tree of one run: every artifact's path is spelled here and nowhere else.

    Rule scripts get the run folder as a param and build this to find the files they did not
    declare one by one (the trial files of a history, say).
    """

    model_config = ConfigDict(frozen=True)

    dir: str

    @property
    def config_json(self) -> str:
        return f"{self.dir}/config.json"

    @property
    def policies_json(self) -> str:
        return f"{self.dir}/policies.json"

    def pool_parquet(self, mode: str) -> str:
        return f"{self.dir}/branches/{mode}/pool.parquet"

    def branch_json(self, mode: str) -> str:
        return f"{self.dir}/branches/{mode}/branch.json"

    @property
    def load_predictor_parquet(self) -> str:
        return f"{self.dir}/load_predictor.parquet"

    @property
    def load_predictor_json(self) -> str:
        return f"{self.dir}/load_predictor.json"

    def predictor_score(self, interval: int | str, label: str) -> str:
        return f"{self.dir}/load_predictor/scores/{interval}/{label}.json"

    def suggestions(self, branch: str, round_index: int | str) -> str:
        return f"{self.dir}/rounds/{branch}/{round_index}/suggestions.json"

    def observations(self, branch: str, round_index: int | str) -> str:
        return f"{self.dir}/rounds/{branch}/{round_index}/observations.json"

    def round_specs(self, branch: str, round_index: int | str) -> str:
        """The folder of the specs a round's new trials replay (the suggest checkpoint writes it)."""
        return f"{self.dir}/rounds/{branch}/{round_index}/specs"

    def spec(self, branch: str, round_index: int | str, key: str) -> str:
        return f"{self.round_specs(branch, round_index)}/{key}.json"

    def refill_suggestions(self, branch: str, round_index: int | str, refill: int | str) -> str:
        """A refill pass of a round: replacements for the previous pass's failed or timed-out replays."""
        return f"{self.dir}/rounds/{branch}/{round_index}/refill/{refill}/suggestions.json"

    def refill_specs(self, branch: str, round_index: int | str, refill: int | str) -> str:
        return f"{self.dir}/rounds/{branch}/{round_index}/refill/{refill}/specs"

    def pass_files(self, branch: str, round_index: int | str, refill: int) -> tuple[str, str]:
        """The suggestions file and specs folder of pass `refill` of a round (0: the round's first pass)."""
        if refill == 0:
            return self.suggestions(branch, round_index), self.round_specs(branch, round_index)
        return self.refill_suggestions(branch, round_index, refill), self.refill_specs(branch, round_index, refill)

    def trial_batch(self, branch: str, round_index: int | str, batch: int | str) -> str:
        """The trial files one replay job of a round writes (the job's declared output folder)."""
        return f"{self.dir}/rounds/{branch}/{round_index}/trials/{batch}"

    def replaying(self, branch: str, round_index: int | str, batch: int | str) -> str:
        """Where a replay job writes its trial files until it has them all; then renamed to `trial_batch`.

        So a job killed half-way leaves its declared folder missing, never half full.
        """
        return f"{self.dir}/rounds/{branch}/{round_index}/replaying/{batch}"

    def trial(self, branch: str, round_index: int | str, batch: int | str, key: str) -> str:
        """A trial lives under the round that first asked for it, in the folder of the job that replayed it."""
        return f"{self.trial_batch(branch, round_index, batch)}/{key}.json"

    def trial_files(self, branch: str, places: Iterable[Any]) -> dict[str, str]:
        """Key -> trial file, for a branch's observations or suggestions (with key, trial_round, trial_batch)."""
        return {
            p.key: self.trial(branch, p.trial_round, p.trial_batch, p.key)
            for p in places
            if p.key and p.trial_round is not None and p.trial_batch is not None
        }

    def started(self, key: str) -> str:
        """Marks a trial whose replay started and is not journaled yet (see trial.store.run_replay_job)."""
        return f"{self.dir}/journal/{key}.started"

    def journal(self, key: str) -> str:
        """Every finished trial is kept here too, out of Snakemake's reach (see trial.store.run_trial_job)."""
        return f"{self.dir}/journal/{key}.json"

    @property
    def candidates_parquet(self) -> str:
        return f"{self.dir}/candidates.parquet"

    @property
    def summary_json(self) -> str:
        return f"{self.dir}/summary.json"

    @property
    def finish_json(self) -> str:
        """The finish: the top deployments on fresh traffic samples (results.finish.FinishResult)."""
        return f"{self.dir}/finish.json"

    def finish_share_json(self, branch: str) -> str:
        """A branch's share of the finish, replayed while another branch searched (results.finish_share.FinishShare)."""
        return f"{self.dir}/finish_shares/{branch}.json"

    @property
    def stress_json(self) -> str:
        return f"{self.dir}/stress.json"

    @property
    def capacity_json(self) -> str:
        """The top deployments' highest load within the SLA (results.capacity.CapacityResult)."""
        return f"{self.dir}/capacity.json"

    @property
    def aiconfigurator_pick_json(self) -> str:
        """aiconfigurator's own pick for the sweep (baselines.model.AiconfiguratorPick)."""
        return f"{self.dir}/baselines/aiconfigurator_pick.json"

    @property
    def baselines_json(self) -> str:
        """The baselines, replayed next to the search (baselines.model.BaselinesResult)."""
        return f"{self.dir}/baselines.json"

    def ranked_csv(self, is_pareto: bool) -> str:
        """`pareto.csv` for a Pareto goal, `ranked.csv` otherwise."""
        return f"{self.dir}/{'pareto' if is_pareto else 'ranked'}.csv"

    @property
    def report_dir(self) -> str:
        return f"{self.dir}/report"

    def report_file(self, name: str) -> str:
        """`report.md` and the plots beside it."""
        return f"{self.report_dir}/{name}"

    @property
    def deploy_dir(self) -> str:
        """Deployment files of the top candidates: `deploy/<rank>/`."""
        return f"{self.dir}/deploy"

    def deployment(self, rank: int) -> str:
        return deployment_folder(self.deploy_dir, rank)

    @property
    def manifest_json(self) -> str:
        return f"{self.dir}/manifest.json"

    @property
    def logs_dir(self) -> str:
        return f"{self.dir}/logs"

    def log(self, stage: str) -> str:
        return f"{self.logs_dir}/{stage}.log"

    @property
    def pilot_logs(self) -> str:
        """The pilots' own logs (spica_lib/pilot/)."""
        return f"{self.logs_dir}/pilots"

    @property
    def pilot_spools(self) -> str:
        """The pilots' spools: one per sweep process, removed when it ends (spica_lib/pilot/launch.py)."""
        return f"{self.dir}/.pilot"

    @property
    def sweep_process_json(self) -> str:
        """Which Snakemake runs the sweep now, while it runs (run/sweep_process.py)."""
        return f"{self.dir}/sweep_process.json"

    @property
    def trace_scans(self) -> str:
        """Each trace's scan, kept for the run's other processes (traces/scan.py)."""
        return f"{self.dir}/.trace-scans"

    @property
    def trace_resamples(self) -> str:
        """The finish's resamples of a trace and the search's sample (traces/resample.py)."""
        return f"{self.dir}/.trace-resamples"

    @property
    def snakemake_log(self) -> str:
        """Snakemake's own log of the last `spica run`, with whatever its jobs printed (run/run_screen.py)."""
        return f"{self.logs_dir}/snakemake.log"


class RunLayout(RunFiles):
    """A run as the Snakefile plans it: its files, and what the DAG needs to know before any job runs."""

    run: str
    config_file: str
    config_sha256: str
    trace_file: str | None
    modes: list[str]
    predictor_jobs: list[tuple[int, str]]  # (throughput interval, candidate label) to score
    max_rounds: int
    rounds_in_flight: int  # sweep.rounds_in_flight: round k is suggested once round k - this is told
    is_pareto: bool
    max_eval_seconds: float | None
    parallel_evals: int
    replay_mb: int = 4000  # SLURM mem_mb per replay running at once, from the largest workload (run/job_memory.py)
    search_replay_mb: int = 4000  # the same for the search's replay jobs (a sampled trace's share)
    workloads: int = 1  # each is its own replay of every trial
    finish_trials: int = 0  # the finish's trial replays at most (results/sequential.py: most_finish_replays)
    baselines: bool = False  # sweep.baselines: replay the baselines next to the search
    stress_trials: int = 0  # the stress test's trial replays: stress_top x 4 perturbations (0: off)
    capacity_trials: int = 0  # the capacity bisection's replays at most: capacity_top x MAX_REPLAYS (0: off)

    @property
    def last_round(self) -> int:
        return self.max_rounds - 1

    @property
    def ranking_csv(self) -> str:
        return self.ranked_csv(self.is_pareto)

    @property
    def finish_shares(self) -> bool:
        """Whether each branch replays its share of the finish once its last round is told, while another branch
        searches (results/finish_share.py): with a finish, several branches, and a core for each."""
        return self.finish_trials > 0 and len(self.modes) > 1 and self.parallel_evals >= len(self.modes)


def locate_config(snakemake_config: dict[str, Any], configfiles: list[str], default: str = DEFAULT_CONFIG) -> str:
    """The Spica YAML for this invocation: `--config spica=FILE`, else the last `--configfile`, else the default."""
    if snakemake_config.get("spica"):
        chosen = str(snakemake_config["spica"])
    elif configfiles:
        chosen = str(configfiles[-1])
    else:
        chosen = default
    return _stable_path(chosen)


def _stable_path(path: str) -> str:
    # Snakemake compares input paths as strings: spell one file one way, however it was given.
    resolved = Path(path).resolve()
    try:
        return str(resolved.relative_to(Path.cwd()))
    except ValueError:
        return str(resolved)


def prepare_run(
    config_file: str, run: str | None = None, root: str = RESULTS_ROOT, check_layouts: bool = True
) -> RunLayout:
    """Validate the config and name its run; refuse to mix a different config into an existing run.

    `check_layouts` also refuses a listed mode or backend with no layout; a job process (a SLURM job
    re-reads the Snakefile) skips it, since the invocation that submitted the job already checked.
    """
    validated = build_validated_config(config_file, run)
    config = validated.config
    if check_layouts:
        try:
            enumerate_branches(config, apply_policy_filters(config).kept)
        except NoViableParallelConfig as error:
            raise ConfigError(error.problems, source=config_file) from error
    # The DAG needs the scoring jobs before policies.json exists: plan them from the config here.
    plan = plan_predictor_jobs(config, apply_policy_filters(config).kept)
    layout = RunLayout(
        dir=f"{root}/{validated.run}",
        run=validated.run,
        config_file=config_file,
        config_sha256=validated.config_sha256,
        trace_file=validated.inputs.trace_file,
        modes=list(dict.fromkeys(config.search_space.deployment_mode)),
        predictor_jobs=[(job.interval, job.label) for job in plan.jobs],
        max_rounds=config.sweep.max_rounds,
        rounds_in_flight=config.sweep.rounds_in_flight,
        is_pareto=config.goal.is_pareto,
        max_eval_seconds=config.sweep.max_eval_seconds,
        parallel_evals=config.sweep.parallel_evals,
        replay_mb=replay_mb(largest_input_tokens(config)),
        search_replay_mb=replay_mb(search_input_tokens(config)),
        workloads=len(config.workloads or [config.workload]),
        finish_trials=most_finish_replays(config),
        baselines=bool(config.sweep.baselines),
        stress_trials=config.sweep.stress_top * 4,
        capacity_trials=config.sweep.capacity_top * CAPACITY_REPLAYS,
    )
    existing = Path(layout.config_json)
    if existing.is_file():
        # Only the hash and version are needed; a full model read would also re-check the trace path.
        data = json.loads(existing.read_text(encoding="utf-8"))
        recorded = data.get("config_sha256", "")
        if data.get("schema_version") != validated.schema_version:
            raise ConfigError(
                [
                    (
                        "run",
                        f"{layout.dir} was written by an older Spica (run layout version {data.get('schema_version')}, "
                        f"this one writes {validated.schema_version}) and cannot be resumed; move it away, or "
                        "name a new run with `run=`",
                    )
                ],
                source=config_file,
            )
        changed = simulator_changes(data, validated)
        if changed:
            raise ConfigError(
                [
                    (
                        "run",
                        f"{layout.dir} was replayed with {', '.join(changed)}; resuming would rank trials of "
                        "two simulators together: name a new run with `run=`, or reinstall what the run used",
                    )
                ],
                source=config_file,
            )
        if recorded != validated.config_sha256:
            raise ConfigError(
                [
                    (
                        "run",
                        f"{layout.dir} already holds a run of a different config (sha256 {recorded[:12]}); "
                        "pick another run name, or drop `run=` to use the config's own id",
                    )
                ],
                source=config_file,
            )
    return layout


# What decides a replay's numbers besides the config: the simulator, the step timing and its data.
SIMULATOR_PACKAGES = ("ai-dynamo", "ai-dynamo-runtime", "aiconfigurator-core")


def simulator_changes(recorded: dict[str, Any], validated: ValidatedConfig) -> list[str]:
    """'<part> <recorded> (here <now>)' for each simulator package or perf DB that differs from the run's."""
    changes = []
    versions = recorded.get("versions") or {}
    for name in SIMULATOR_PACKAGES:
        if versions.get(name) != validated.versions.get(name):
            changes.append(f"{name} {versions.get(name)} (here {validated.versions.get(name)})")
    databases = (recorded.get("catalog") or {}).get("perf_db_versions") or {}
    for backend, version in validated.catalog.perf_db_versions.items():
        if databases.get(backend) != version:
            changes.append(f"the {backend} perf DB {databases.get(backend)} (here {version})")
    return changes
