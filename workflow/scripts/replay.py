"""Rule `replay`: one replay job of a round -> rounds/<branch>/<k>/trials/<job>/<key>.json, one file per trial.

Dynamo and the perf DBs are loaded once here; each trial replays in a child forked from this warm
process, `threads` at a time, and is journaled as soon as it ends (failures are results). The trial
files are gathered in rounds/<branch>/<k>/replaying/<job>/ and the folder is renamed into place
when every trial of the job has its file: a job killed half-way leaves no half-full output that a
resumed Snakemake could take for finished; the rerun restores the journaled trials.
"""

import contextlib
import os
import shutil
import socket
from pathlib import Path

from spica_lib.base.artifacts import read_model, write_model
from spica_lib.base.logs import stage_log
from spica_lib.run.layout import RunFiles
from spica_lib.search.history import RoundSuggestions
from spica_lib.trial.spec import TrialSpec
from spica_lib.trial.store import note_job_error, run_replay_job

smk = snakemake  # noqa: F821 (injected by Snakemake's script directive)
files = RunFiles(dir=smk.params.run_dir)
branch, round_index, batch = smk.wildcards.branch, int(smk.wildcards.round), int(smk.wildcards.batch)

with stage_log(smk.log[0], keep=True) as log:  # keep: a retried job's log holds every attempt
    keys = read_model(smk.input.suggestions, RoundSuggestions).batches()[batch]
    specs = {key: read_model(files.spec(branch, round_index, key), TrialSpec) for key in keys}
    for key, spec in specs.items():
        if spec.key() != key:
            log.warning("spec %s re-hashes to %s (library changed since the round was suggested)", key, spec.key())
    attempt, last = int(smk.resources.trial_attempt), int(smk.params.last_attempt)
    slurm = f", SLURM job {os.environ['SLURM_JOB_ID']}" if "SLURM_JOB_ID" in os.environ else ""
    log.info(
        "%d trial(s) on %s%s, %d at once, job attempt %d of %d",
        len(specs),
        socket.gethostname(),
        slurm,
        smk.threads,
        attempt,
        last,
    )
    staging = Path(files.replaying(branch, round_index, batch))
    shutil.rmtree(staging, ignore_errors=True)  # a killed attempt's leftovers: the journal has what finished
    staging.mkdir(parents=True)
    records = run_replay_job(
        specs,
        files.journal,
        files.started,
        attempt,
        last,
        max_eval_seconds=smk.params.max_eval_seconds,
        parallel=smk.threads,
        on_warm=lambda seconds: log.info("Dynamo and perf DBs loaded in %.2f s", seconds),
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
    os.replace(staging, smk.output.trials)
    with contextlib.suppress(OSError):  # the round's replaying/ folder, once its last job is done
        staging.parent.rmdir()
