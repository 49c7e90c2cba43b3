"""What `spica run` shows while a sweep runs: per branch its round, trials done of those planned, the best so far
and the early stops; then the stages after the search (the finish's samples, the stress test, the baselines,
the report); with the time elapsed and an estimate of what is left.

Snakemake's job events say which stage is running and when to look again (snakemake_logger_plugin_spica feeds
them in); the figures themselves are read from the run folder (run/status.py). A job's output never reaches
Snakemake's process under SLURM, and rounds and trials are not Snakemake's notions: the files are the one
source that holds them wherever the jobs run.

In a terminal the view is one block, drawn again in place; anywhere else (CI, a SLURM log, a pipe) it is one
line per event: a round told, a stage done, a job failed.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from spica_lib.base.artifacts import read_model
from spica_lib.baselines.model import BaselinesResult
from spica_lib.config.validate import ValidatedConfig
from spica_lib.results.finish import FinishResult
from spica_lib.run.layout import RunFiles
from spica_lib.run.status import RunStatus, duration_text, run_status
from spica_lib.trial.score import score_text

# The stages after the search, in pipeline order: the name a person reads, and the rules that make it up.
AFTER_SEARCH: dict[str, tuple[str, ...]] = {
    "finish": ("finish_share", "finish"),
    "stress test": ("stress",),
    "capacity": ("capacity",),
    "baselines": ("aiconfigurator_pick", "baselines"),
    "summary": ("merge",),
    "report": ("report",),
    "deployment files": ("deploy",),
}
ERASE_BLOCK = "\x1b[{lines}F\x1b[J"  # up to the block's first line, then clear to the screen's end


@dataclass
class StageJobs:
    """One stage's jobs in this invocation of Snakemake: planned, finished, running, failed."""

    planned: int = 0
    finished: int = 0
    running: int = 0
    failed: int = 0


@dataclass
class SweepProgress:
    """What the view knows: the run folder's status and this invocation's jobs per stage."""

    run_dir: Path
    started: float = field(default_factory=time.monotonic)
    status: RunStatus | None = None
    stages: dict[str, StageJobs] = field(default_factory=dict)
    rules_of_job: dict[int, str] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)
    nothing_to_do: bool = False

    # -- Snakemake's events -------------------------------------------------------------------------------------
    def planned(self, jobs_per_rule: dict[str, int]) -> None:
        for stage, rules in AFTER_SEARCH.items():
            count = sum(int(jobs_per_rule.get(rule, 0)) for rule in rules)
            if count:
                self.stages[stage] = StageJobs(planned=count)

    def job_started(self, jobid: int, rule: str) -> None:
        self.rules_of_job[jobid] = rule
        jobs = self._stage_jobs(rule)
        if jobs is not None:
            jobs.running += 1

    def job_finished(self, jobid: int) -> None:
        jobs = self._stage_jobs(self.rules_of_job.get(jobid))
        if jobs is not None:
            jobs.running = max(0, jobs.running - 1)
            jobs.finished += 1

    def job_failed(self, rule: str, logs: list[str]) -> str:
        jobs = self._stage_jobs(rule)
        if jobs is not None:
            jobs.running, jobs.failed = max(0, jobs.running - 1), jobs.failed + 1
        text = f"job {rule} failed" + (f"; its log: {', '.join(logs)}" if logs else "")
        self.failures.append(text)
        return text

    def _stage_jobs(self, rule: str | None) -> StageJobs | None:
        stage = next((name for name, rules in AFTER_SEARCH.items() if rule in rules), None)
        return self.stages.get(stage) if stage else None

    # -- the run folder -----------------------------------------------------------------------------------------
    def refresh(self) -> None:
        """Read the run folder's progress again (nothing before the validate job wrote config.json)."""
        if Path(RunFiles(dir=str(self.run_dir)).config_json).is_file():
            self.status = run_status(self.run_dir)

    # -- words --------------------------------------------------------------------------------------------------
    def elapsed(self) -> str:
        return duration_text(time.monotonic() - self.started)

    def left(self) -> str:
        """What is left: the search's trials at this run's pace, then the stages after it."""
        waiting = [name for name, jobs in self.stages.items() if jobs.finished + jobs.failed < jobs.planned]
        stages = (waiting[0] + (f" and {len(waiting) - 1} stage(s) after it" if len(waiting) > 1 else "")) if waiting else ""
        status = self.status
        if status is not None and status.trials_finished < status.trials_expected:
            search = ("search: time left not known until a trial of this run ends" if status.remaining_seconds is None
                      else f"search: about {duration_text(status.remaining_seconds)} left at this run's pace")  # fmt: skip
            return search + (f", then {stages}" if waiting else "")
        return f"left: {stages}" if waiting else ""

    def branch_lines(self) -> list[str]:
        if self.status is None:
            return ["  validating the config and building the candidate pools"]
        target = read_model(RunFiles(dir=str(self.run_dir)).config_json, ValidatedConfig).config.goal.target
        lines = []
        for b in self.status.branches:
            best = (f"best so far {score_text(b.best_score, target, name=False)} (search's sample)"
                    if b.best_score is not None else "no feasible trial yet")  # fmt: skip
            running = f", {b.trials_running} running" if b.trials_running else ""
            stalled = " (stalled)" if b.stalled else ""
            lines.append(
                f"  {b.branch:<7} round {b.rounds_told}/{b.rounds_total}{stalled} · trials {b.trials_finished} of "
                f"~{max(b.trials_expected, b.trials_finished)}{running} · {best} · {b.trials_stopped_early} stopped early"
            )
        return lines

    def stage_line(self, stage: str) -> str:
        jobs = self.stages[stage]
        if jobs.failed:
            state = "failed"
        elif jobs.finished >= jobs.planned:
            state = "done" + self._stage_detail(stage)
        elif jobs.running:
            state = "running"
        else:
            state = "waiting"
        return f"  {stage:<16} {state}"

    def _stage_detail(self, stage: str) -> str:
        """What a finished stage made, from its file."""
        files = RunFiles(dir=str(self.run_dir))
        try:
            if stage == "finish" and Path(files.finish_json).is_file():
                finish = read_model(files.finish_json, FinishResult)
                counts = sorted(len(d.samples) for d in finish.deployments)
                if counts:
                    samples = f"{counts[0]}" if counts[0] == counts[-1] else f"{counts[0]}-{counts[-1]}"
                    return f": {len(counts)} deployment(s) on {samples} fresh sample(s) each"
            if stage == "baselines" and Path(files.baselines_json).is_file():
                baselines = read_model(files.baselines_json, BaselinesResult).baselines
                return f": {len(baselines)} baseline(s)"
            if stage == "report":
                return f": {files.report_file('report.md')}"
            if stage == "deployment files":
                return f": {files.deploy_dir}/"
        except (OSError, ValueError):  # a file being replaced as it is read: the words wait for the next event
            return ""
        return ""

    def block(self) -> list[str]:
        """The whole view, for a terminal."""
        head = f"spica · {self.elapsed()} elapsed"
        left = self.left()
        lines = [head + (f" · {left}" if left else ""), *self.branch_lines()]
        lines += [self.stage_line(stage) for stage in self.stages]
        lines += [f"  ✗ {failure}" for failure in self.failures]
        return lines


class ProgressView:
    """Draws a SweepProgress on `stream`: in place when it is a terminal, else one line per event."""

    def __init__(self, progress: SweepProgress, stream: TextIO, live: bool, width: int = 120):
        self.progress, self.stream, self.live, self.width = progress, stream, live, width
        self._drawn = 0  # lines of the block on the screen
        self._told: dict[str, int] = {}  # rounds told per branch, when last said
        self._said: set[str] = set()  # stages whose end was said

    def draw(self) -> None:
        """A terminal: the block again, in place."""
        lines = [line[: self.width - 1] for line in self.progress.block()]  # a wrapped line would break the redraw
        erase = ERASE_BLOCK.format(lines=self._drawn) if self._drawn else ""
        self.stream.write(erase + "".join(line + "\n" for line in lines))
        self.stream.flush()
        self._drawn = len(lines)

    def say_events(self) -> None:
        """Not a terminal: one line for each round told and each stage done since the last call."""
        progress = self.progress
        out = []
        if progress.status is not None:
            for branch, line in zip(progress.status.branches, progress.branch_lines(), strict=True):
                if self._told.get(branch.branch, 0) != branch.rounds_told and branch.rounds_told:
                    self._told[branch.branch] = branch.rounds_told
                    out.append(line.strip())
        for stage, jobs in progress.stages.items():
            if stage not in self._said and jobs.planned and jobs.finished >= jobs.planned:
                self._said.add(stage)
                out.append(progress.stage_line(stage).strip())
        left = progress.left()
        for line in out:
            self.stream.write(f"[{progress.elapsed():>6}] {line}" + (f" · {left}" if left else "") + "\n")
        self.stream.flush()

    def say(self, line: str) -> None:
        """One line at once (a failure), in either form."""
        if self.live:
            self.draw()
        else:
            self.stream.write(f"[{self.progress.elapsed():>6}] {line}\n")
            self.stream.flush()

    def update(self) -> None:
        if self.live:
            self.draw()
        else:
            self.say_events()
