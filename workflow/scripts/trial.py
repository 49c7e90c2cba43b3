"""Rule `trial`: specs/<key>.json -> rounds/<branch>/<k>/trials/<key>.json (always written: failures are results)."""

import os
import socket
from pathlib import Path

from spica_lib.base.artifacts import read_model, write_model
from spica_lib.base.logs import stage_log
from spica_lib.trial.spec import TrialSpec
from spica_lib.trial.store import run_trial_job

smk = snakemake  # noqa: F821 (injected by Snakemake's script directive)

with stage_log(smk.log[0]) as log:
    spec = read_model(smk.params.spec, TrialSpec)  # from the round's specs folder, the declared input
    key = Path(smk.output.trial).stem  # the identity the round assigned; the file name must match it
    if spec.key() != key:
        log.warning("spec %s re-hashes to %s (library changed since the round was suggested)", key, spec.key())
    attempt, last = int(smk.resources.trial_attempt), int(smk.params.last_attempt)
    slurm = f", SLURM job {os.environ['SLURM_JOB_ID']}" if "SLURM_JOB_ID" in os.environ else ""
    log.info("on %s%s, job attempt %d of %d", socket.gethostname(), slurm, attempt, last)  # > 1: the last job died
    record, restored = run_trial_job(
        spec, key, smk.params.journal, attempt, last, max_eval_seconds=smk.params.max_eval_seconds
    )
    write_model(smk.output.trial, record)
    if restored:
        log.info("restored from the journal: a previous job finished this replay but its output was removed")
    result = record.result
    reason = f" ({result.reason})" if result.reason else ""
    log.info(
        "%s %s: %s%s (score %s, %.1f s)",
        spec.deployment_mode,
        spec.parallel_config.label(),
        result.status,
        reason,
        result.score,
        result.wall_seconds,
    )
