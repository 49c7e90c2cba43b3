"""Rule `trial`: specs/<key>.json -> trials/<key>.json (always written: failures are results too)."""

from pathlib import Path

from spica_lib.artifacts import read_model, write_model
from spica_lib.logs import stage_log
from spica_lib.trial import TrialRecord, TrialSpec, evaluate_trial

smk = snakemake  # noqa: F821 (injected by Snakemake's script directive)

with stage_log(smk.log[0]) as log:
    spec = read_model(smk.input.spec, TrialSpec)
    key = Path(smk.output.trial).stem  # the identity the round assigned; the file name must match it
    if spec.key() != key:
        log.warning("spec %s re-hashes to %s (library changed since the round was suggested)", key, spec.key())
    result = evaluate_trial(spec, max_eval_seconds=smk.params.max_eval_seconds)
    write_model(smk.output.trial, TrialRecord(key=key, spec=spec, result=result))
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
