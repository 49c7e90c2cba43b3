"""Rule `replay`: one replay job of a round, one trial file per replayed trial."""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import socket
from pathlib import Path

from spica_lib.base.artifacts import read_model, write_model
from spica_lib.base.logs import stage_log
from spica_lib.replay.warm_up import failures as warm_up_failures
from spica_lib.run.job_args import HOST, JobArgs
from spica_lib.run.layout import RunFiles
from spica_lib.search.history import RoundSuggestions
from spica_lib.trial.evaluate import warm_up_trials
from spica_lib.trial.spec import TrialSpec
from spica_lib.trial.store import note_job_error, run_replay_job


def replay_specs(job: JobArgs) -> dict[str, TrialSpec]:
    """The trials of one replay job, key -> spec."""
    keys = read_model(job.input["suggestions"], RoundSuggestions).batch(int(job.wildcards["batch"]))
    return {key: read_model(Path(job.input["specs"]) / f"{key}.json", TrialSpec) for key in keys}


def warm_up_for_replay(job: JobArgs) -> None:
    """Load what this replay job's trials need into the calling process (the warm host, before it forks)."""
    warm_up_trials(replay_specs(job))


def _log_warm_up(log: logging.Logger, seconds: float) -> None:
    log.info("Dynamo and perf DBs ready after %.2f s", seconds)
    for signature, reason in warm_up_failures().items():
        log.warning("the warm-up for %s failed (%s); its replays load what they need themselves", signature, reason)


def replay(job: JobArgs) -> None:
    """Rule `replay`: one replay job of a round -> rounds/<branch>/<k>/trials/<job>/<key>.json, one file per trial.

    Each trial replays in a child forked from this (warm) process, `threads` at a time, and is
    journaled as soon as it ends (failures are results). The trial files are gathered in
    rounds/<branch>/<k>/replaying/<job>/ and the folder is renamed into place when every trial of
    the job has its file: a job killed half-way leaves no half-full output that a resumed Snakemake
    could take for finished; the rerun restores the journaled trials.
    """
    files = RunFiles(dir=job.params["run_dir"])
    branch, round_index, batch = job.wildcards["branch"], int(job.wildcards["round"]), int(job.wildcards["batch"])
    with stage_log(job.log[0], keep=True) as log:  # keep: a retried job's log holds every attempt
        specs = replay_specs(job)
        for key, spec in specs.items():
            if spec.key() != key:
                log.warning("spec %s re-hashes to %s (library changed since the round was suggested)", key, spec.key())
        attempt, last = int(job.resources["trial_attempt"]), int(job.params["last_attempt"])
        slurm = f", SLURM job {os.environ['SLURM_JOB_ID']}" if "SLURM_JOB_ID" in os.environ else ""
        log.info(
            "%d trial(s) on %s%s, %d at once, job attempt %d of %d, %s",
            len(specs),
            socket.gethostname(),
            slurm,
            job.threads,
            attempt,
            last,
            HOST.where(),
        )
        staging = Path(files.replaying(branch, round_index, batch))
        shutil.rmtree(staging, ignore_errors=True)  # a killed attempt's leftovers: the journal has what finished
        staging.mkdir(parents=True)
        round_file = read_model(job.input["suggestions"], RoundSuggestions)
        records = run_replay_job(
            specs,
            files.journal,
            files.started,
            attempt,
            last,
            max_eval_seconds=job.params["max_eval_seconds"],
            parallel=job.threads,
            # The host's warm-up for this job counts: it is what the job waited for before its first replay.
            on_warm=lambda seconds: _log_warm_up(log, seconds + HOST.prepare_seconds),
            # The round's bar and prefix budget, not the job's.
            prune=round_file.prune,
            prefix_seconds=round_file.prefix_seconds,
        )
        try:
            for record, source in records:
                write_model(staging / Path(files.trial(branch, round_index, batch, record.key)).name, record)
                result = record.result
                reason = f" ({result.reason})" if result.reason else ""
                log.info(
                    "%s %s %s: %s%s (score %s, %.2f s wall)%s",
                    record.key[:12],
                    record.spec.deployment_mode,
                    record.spec.parallel_config.label(),
                    result.status,
                    reason,
                    result.score,
                    result.wall_seconds,
                    " restored from the journal" if source == "journal" else "",
                )
        except Exception as error:  # our own failure, not a kill: the last attempt names it instead of "killed"
            note_job_error([files.started(key) for key in specs], error)
            raise
        # An earlier attempt's folder can be here: one that went on writing after its job was given up on
        # (Snakemake had already removed its outputs). Every trial of it is in the journal, and so here.
        shutil.rmtree(job.output["trials"], ignore_errors=True)
        os.replace(staging, job.output["trials"])
        with contextlib.suppress(OSError):  # the round's replaying/ folder, once its last job is done
            staging.parent.rmdir()
