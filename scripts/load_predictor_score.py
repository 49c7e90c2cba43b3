"""Rule `load_predictor_score`: one candidate at one interval -> load_predictor/scores/<interval>/<label>.json."""

from spica_lib.base.artifacts import read_model, write_model
from spica_lib.base.logs import stage_log
from spica_lib.config.policies import PolicyFilter
from spica_lib.config.presets import load_predictor
from spica_lib.config.validate import ValidatedConfig
from spica_lib.predictor.dynamo import lean_imports
from spica_lib.predictor.plan import plan_predictor_jobs
from spica_lib.predictor.scoring import score_predictor_job

smk = snakemake  # noqa: F821 (injected by Snakemake's script directive)

with stage_log(smk.log[0]) as log:
    config = read_model(smk.input.config, ValidatedConfig).config
    plan = plan_predictor_jobs(config, read_model(smk.input.policies, PolicyFilter).kept)
    interval, label = int(smk.wildcards.interval), smk.wildcards.label
    job = next(j for j in plan.jobs if (j.interval, j.label) == (interval, label))
    lean_imports(load_predictor(job.entry).load_predictor)  # this process scores one family only
    score = score_predictor_job(
        job,
        config.workload.search_part().trace_path,  # never the held-out part: it is the finish's check
        config.workload.arrival_speedup_ratio,
        config.search_space.load_predictor_candidates,
    )
    write_model(smk.output.score, score)
    log.info(
        "%s @ %d s: loss %s over %d of %d windows (warm-up %d) in %.1f s",
        label,
        interval,
        score.loss,
        score.windows_scored,
        score.windows,
        score.warmup,
        score.seconds,
    )
