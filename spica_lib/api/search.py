"""`run_smart_search(config)`: the sweep `spica run` runs, from Python, with its ranked deployments returned.

It runs the same Snakemake workflow in this process through Snakemake's own Python entry points
(`snakemake.cli.parse_args`, which reads a `--profile`, and `args_to_api`, which drives
`snakemake.api.SnakemakeApi`), with the command line `spica run` builds: the same run folder
(results/<config hash> under `workdir`), the same resume (finished trials are never replayed),
the same stale-lock handling and profiles. The answer is read back from the run's files, the
same way `spica show` and the report read them, so what it returns is what the files say.

The warm host starts as a child of this process and stops with the sweep. A sweep in progress
owns the process's working folder: `workdir` is entered for the call and left after it.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from spica_lib.traces.folders import PARSE_SCANS_ENV, trace_folders, use_trace_folders
from spica_lib.config.validate import build_validated_config
from spica_lib.results.merge import CandidateRow
from spica_lib.results.summary import SweepSummary
from spica_lib.run.launcher import clear_stale_lock, snakemake_command
from spica_lib.run.layout import RESULTS_ROOT
from spica_lib.run.view import RunView

RUN_FOLDER_VARIABLES = (PARSE_SCANS_ENV,)  # set by the Snakefile to this run's folders


class SearchOutcome(BaseModel):
    """What a finished sweep found: its folder, the ranked deployments and the summary."""

    model_config = ConfigDict(extra="forbid")

    run_dir: Path
    # Scalar goal: every feasible deployment once, best first (the finished top in the finish's
    # order, the recommendation first). Pareto goal: the front.
    ranked: list[CandidateRow]
    summary: SweepSummary

    @property
    def best(self) -> CandidateRow | None:
        """The recommendation (scalar goal): the first of `ranked`."""
        return self.ranked[0] if self.ranked else None


class SearchFailed(RuntimeError):
    """The sweep did not finish (a job failed, or it found nothing deployable); its files stay for a resume."""

    def __init__(self, run_dir: Path, exit_code: int):
        super().__init__(f"the sweep in {run_dir} did not finish (exit {exit_code}); its log is under .snakemake/log/")
        self.run_dir, self.exit_code = run_dir, exit_code


def run_smart_search(
    config: str | Path,
    *,
    cores: int | None = 2,
    profile: str | None = None,
    run: str | None = None,
    workdir: str | Path | None = None,
    snakemake_args: list[str] | None = None,
) -> SearchOutcome:
    """Run (or resume) the sweep of the Spica YAML `config`; return its ranked deployments.

    A bad config raises `spica_lib.config.ConfigError` before anything runs; a sweep that does
    not finish raises `SearchFailed`. `profile` (e.g. "profiles/slurm") and `cores` are as for
    `spica run`; `snakemake_args` go to Snakemake unchanged.
    """
    with _working_folder(workdir):
        config_file = str(Path(config).resolve())
        validated = build_validated_config(config_file, run)  # raises ConfigError, naming every problem
        run_dir = Path(RESULTS_ROOT, validated.run).resolve()
        command = snakemake_command(config_file, cores, profile, run, list(snakemake_args or []))
        problem = clear_stale_lock(Path.cwd().resolve(), command)
        if problem:
            raise SearchFailed(run_dir, 1) from RuntimeError(problem)
        code = _run_snakemake(command[3:])  # without "python -m <Snakemake's main>"
        if code != 0:
            raise SearchFailed(run_dir, code)
        view = RunView(run_dir)
        summary = view.summary
        if summary is None:
            raise SearchFailed(run_dir, code)
        return SearchOutcome(run_dir=run_dir, ranked=view.ranked, summary=summary)


def _run_snakemake(arguments: list[str]) -> int:
    from snakemake.cli import args_to_api, parse_args

    from spica_lib.run.snakemake_main import stop_without_deadlock

    stop_without_deadlock()
    with _run_environment():
        try:
            parser, args = parse_args(arguments)
            return 0 if args_to_api(args, parser) else 1
        except SystemExit as stop:  # the Snakefile exits for a config error, or when nothing is deployable
            return stop.code if isinstance(stop.code, int) else 1


@contextlib.contextmanager
def _run_environment() -> Iterator[None]:
    # The Snakefile points its own process at the run's folders (trace scans, resamples: traces/folders.py), and
    # its jobs' Snakemake at its kept scans through a variable. In a `spica run` they die with the process; here
    # they would outlive the sweep and send the next sweep (or any later resample) of this process to this run's.
    before = {name: os.environ.get(name) for name in RUN_FOLDER_VARIABLES}
    folders = trace_folders()
    try:
        yield
    finally:
        use_trace_folders(folders)
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@contextlib.contextmanager
def _working_folder(workdir: str | Path | None) -> Iterator[None]:
    if workdir is None:
        yield
        return
    before = os.getcwd()
    os.chdir(workdir)
    try:
        yield
    finally:
        os.chdir(before)
