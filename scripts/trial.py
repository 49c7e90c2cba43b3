"""Rule `trial`: specs/<key>.json -> trials/<key>.json (always written: failures are results too)."""

from pathlib import Path

from spica_lib.artifacts import read_model
from spica_lib.logs import stage_log
from spica_lib.trial import TrialSpec, evaluate_trial, write_trial

smk = snakemake  # noqa: F821 (injected by Snakemake's script directive)

with stage_log(smk.log[0]) as log:
    spec = read_model(smk.input.spec, TrialSpec)
    result = evaluate_trial(spec, max_eval_seconds=smk.params.max_eval_seconds)
    path = write_trial(Path(smk.output.trial).parent, spec, result)
    assert str(path) == str(Path(smk.output.trial)), f"trial key mismatch: {path} vs {smk.output.trial}"
    log.info("%s %s: %s%s (score %s, %.1f s)", spec.deployment_mode, spec.parallel_config.label(), result.status, f" ({result.reason})" if result.reason else "", result.score, result.wall_seconds)
