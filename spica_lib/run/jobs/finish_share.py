"""The finish share job's body: a branch's first-look finish samples and first stress replays, replayed while
another branch searches (results/finish_share.py) -> finish_shares/<branch>.json."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

from spica_lib.base.artifacts import read_model, write_model
from spica_lib.base.logs import stage_log
from spica_lib.baselines.model import AiconfiguratorPick
from spica_lib.baselines.plan import baseline_name, pick_replay
from spica_lib.predictor.plan import LoadPredictorResult
from spica_lib.results.finish import sample_kind, sample_specs
from spica_lib.results.finish_share import FinishShare
from spica_lib.results.stress import first_replays
from spica_lib.run.job_args import HOST, JobArgs
from spica_lib.run.jobs.ranked import finish_top, ranked_run
from spica_lib.run.layout import RunFiles
from spica_lib.trial.evaluate import warm_up_trials
from spica_lib.trial.spec import TrialResult, TrialSpec
from spica_lib.trial.store import run_replay_job


def replays_ahead(job: JobArgs) -> dict[str, TrialSpec]:
    """What the branch can replay ahead of the finish, the baselines and the stress test: aiconfigurator's pick
    ("<key>+baseline", when it is known by now and the branch did not replay it: it needs only the config), then
    in its ranking's order its top deployments' first-look samples ("<key>#<i>"), then the stress test's first replays
    ("<key>~<perturbation>", results/stress.py) of its top `stress_top`, its #1 under every perturbation (as if
    it were the sweep's #1)."""
    run = ranked_run(job)  # the branch's own history only: its top is its share of the sweep's
    top = finish_top(run)  # empty with no finish (finish_samples unset): range(first) runs only for a finish
    sweep = run.config.sweep
    first = sweep.finish_samples
    planned: dict[str, TrialSpec] = {}
    pick_file = job.params.get("pick")
    if pick_file and Path(pick_file).exists():  # known by now (its search may still run on a first run)
        winners = read_model(job.input["predictor"], LoadPredictorResult).winners()
        pick = pick_replay(run.config, read_model(pick_file, AiconfiguratorPick), winners)
        if pick is not None and pick.key() not in run.records:
            planned[baseline_name(pick.key())] = pick
    planned.update(sample_specs(top, sample_kind(run.config), {key: range(first) for key in top}))
    stressed = dict(list(top.items())[: sweep.stress_top])
    if len(stressed) > 0 and sweep.stress_band:
        planned.update(first_replays(stressed, float(sweep.stress_band)))
    return planned


def share_replays(
    planned: dict[str, TrialSpec],
    others_searching: Callable[[], bool],
    replay: Callable[[dict[str, TrialSpec]], Iterator[tuple[str, TrialResult]]],
    width: int,
) -> tuple[list[str], str]:
    """Replay `planned` in order, `width` at a time, while `others_searching()`; return the names replayed and
    why it stopped. Checked before each batch: a batch started runs to its end (at most `width` replays)."""
    names, done, step = list(planned), [], max(1, width)
    for start in range(0, len(names), step):
        if not others_searching():
            why = f"every other branch {'told' if done else 'had told'} its last round"
            return done, f"{why}: the finish replays what it needs of the other {len(names) - len(done)} at full width"
        batch = {name: planned[name] for name in names[start : start + step]}
        done += [name for name, _ in replay(batch)]
    return done, f"replayed all {len(names)} while another branch searched"


def warm_up_for_finish_share(job: JobArgs) -> None:
    """Load what the share's replays need into the calling process (the warm host, before it forks)."""
    if _others_searching(job):
        warm_up_trials(replays_ahead(job))


def finish_share(job: JobArgs) -> None:
    """Rule `finish_share`: the branch's first-look finish samples and first stress replays while another branch
    searches."""
    files = RunFiles(dir=job.params["run_dir"])
    branch = job.wildcards["branch"]
    with stage_log(job.log[0]) as log:
        planned = replays_ahead(job)

        def replay(batch: dict[str, TrialSpec]) -> Iterator[tuple[str, TrialResult]]:
            records = run_replay_job(
                batch, files.journal, files.started, 1, 1,
                max_eval_seconds=job.params["max_eval_seconds"], parallel=job.threads,
            )  # fmt: skip
            for record, source in records:
                log.info("%s: %s %s (%s)", record.key[:14], record.result.status, record.result.score, source)
                yield record.key, record.result

        done, stopped = share_replays(planned, lambda: _others_searching(job), replay, job.threads)
        log.info("%s: %d of %d replay(s) ahead %s; %s", branch, len(done), len(planned), HOST.where(), stopped)
        write_model(job.output["share"], FinishShare(branch=branch, planned=list(planned), replayed=done, stopped=stopped))


def _others_searching(job: JobArgs) -> bool:
    """Whether some other branch has not told its last round yet (its history file does not exist)."""
    return not all(os.path.exists(path) for path in job.params["others"])
