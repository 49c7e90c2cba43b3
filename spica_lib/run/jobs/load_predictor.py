"""Rule `load_predictor_score`: one predictor candidate at one throughput interval -> its score file.

Run in its rule script's own fresh process (its table entry's placement "process"): it imports only its
candidate's family (lean_imports), which a warm process that loaded another family could not.
"""

from __future__ import annotations

from spica_lib.base.artifacts import read_model, write_model
from spica_lib.base.logs import stage_log
from spica_lib.config.policies import PolicyFilter
from spica_lib.config.presets import load_predictor
from spica_lib.config.validate import ValidatedConfig
from spica_lib.predictor.dynamo import lean_imports
from spica_lib.predictor.plan import plan_predictor_jobs
from spica_lib.predictor.scoring import score_predictor_job
from spica_lib.run.job_args import JobArgs


def score(job: JobArgs) -> None:
    """Score candidate `label` at `interval` s on the search's part of the workload (never the held-out part: it
    is the finish's check) -> load_predictor/scores/<interval>/<label>.json."""
    with stage_log(job.log[0]) as log:
        config = read_model(job.input["config"], ValidatedConfig).config
        plan = plan_predictor_jobs(config, read_model(job.input["policies"], PolicyFilter).kept)
        interval, label = int(job.wildcards["interval"]), job.wildcards["label"]
        chosen = next(j for j in plan.jobs if (j.interval, j.label) == (interval, label))
        lean_imports(load_predictor(chosen.entry).load_predictor)  # this process scores one family only
        result = score_predictor_job(
            chosen,
            config.workload.search_part().trace_path,
            config.workload.arrival_speedup_ratio,
            config.search_space.load_predictor_candidates,
        )
        write_model(job.output["score"], result)
        log.info("%s @ %d s: loss %s over %d of %d windows (warm-up %d) in %.1f s", label, interval, result.loss,
                 result.windows_scored, result.windows, result.warmup, result.seconds)  # fmt: skip
