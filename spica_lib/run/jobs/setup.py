"""The stages before round 0 (validate, policies, branches, load_predictor), run in Snakemake's own process.

The Snakefile already validated the config, filtered the policies and enumerated the branches while
it was parsed (spica_lib/run/layout.py: prepare_run), so this process holds what these stages compute
(the catalog, the perf-DB metadata, the KV estimates) and each takes milliseconds here, where a process
of its own would pay a Python start, its imports and that work again (about 4 s for the four). Each is
still a Snakemake job with its declared outputs and log, written atomically: a kill loses nothing and a
resumed sweep skips what is there. The rules call `run_in_snakemake` from a `run:` block; Snakemake runs
those in its own process when threads are allowed (`--force-use-threads`, which `spica run` and the
workflow's default profile set), else in a Snakemake process of their own, which is slower but the same.
"""

from __future__ import annotations

import threading
from types import SimpleNamespace
from typing import Any

from spica_lib.base.artifacts import read_model, write_model
from spica_lib.base.logs import stage_log
from spica_lib.config.policies import PolicyFilter, apply_policy_filters
from spica_lib.traces.scan import keep_scan
from spica_lib.config.validate import ValidatedConfig, build_validated_config
from spica_lib.pools.branches import enumerate_branches
from spica_lib.pools.table import write_pool
from spica_lib.predictor.plan import PresetScore, merge_scores, plan_predictor_jobs
from spica_lib.predictor.table import write_predictor_table
from spica_lib.run.job_args import JobArgs

# One at a time: Snakemake may run two of them at once on its threads, and each stage's log is one logger.
_ONE_AT_A_TIME = threading.Lock()


def validate(job: JobArgs) -> None:
    """Rule `validate`: config YAML -> results/<run>/config.json (and each trace's scan, kept for the jobs)."""
    with stage_log(job.log[0]) as log:
        validated = build_validated_config(job.input["config"], job.params["run"])
        for trace in validated.trace_paths():  # read and hashed once per run: the jobs read these scans
            log.info("trace %s: scan kept at %s", trace, keep_scan(trace) or "(nowhere: not a sweep)")
        write_model(job.output["config"], validated)
        log.info("run %s: config sha256 %s", validated.run, validated.config_sha256)
        log.info("perf DB versions: %s", validated.catalog.perf_db_versions)


def policies(job: JobArgs) -> None:
    """Rule `policies`: config.json -> results/<run>/policies.json."""
    with stage_log(job.log[0]) as log:
        result = apply_policy_filters(read_model(job.input["config"], ValidatedConfig).config)
        write_model(job.output["policies"], result)
        log.info("kept %d policies, dropped %d", len(result.kept), len(result.dropped))
        for dropped in result.dropped:
            log.info("dropped %s: %s", dropped.label, dropped.reason)


def branches(job: JobArgs) -> None:
    """Rule `branches`: config.json + policies.json -> branches/<mode>/{pool.parquet, branch.json}."""
    with stage_log(job.log[0]) as log:
        config = read_model(job.input["config"], ValidatedConfig).config
        kept = read_model(job.input["policies"], PolicyFilter).kept
        found = {b.spec.deployment_mode: b for b in enumerate_branches(config, kept)}
        for mode, pool_path, spec_path in zip(
            job.params["modes"], job.outputs("pools"), job.outputs("specs"), strict=True
        ):
            branch = found[mode]
            write_pool(pool_path, branch.pool, mode, branch.spec.backends)
            write_model(spec_path, branch.spec)
            log.info(
                "%s: %s, %d layouts %s",
                mode,
                branch.spec.status,
                branch.spec.pool_size,
                branch.spec.pool_size_by_backend,
            )
            for skipped in branch.spec.skipped_backends:
                log.info("%s: backend %s skipped: %s", mode, skipped.backend, skipped.reason)


def load_predictor(job: JobArgs) -> None:
    """Rule `load_predictor`: the scores -> load_predictor.parquet + load_predictor.json."""
    with stage_log(job.log[0]) as log:
        config = read_model(job.input["config"], ValidatedConfig).config
        plan = plan_predictor_jobs(config, read_model(job.input["policies"], PolicyFilter).kept)
        scores = [read_model(path, PresetScore) for path in job.inputs("scores")]
        result, rows = merge_scores(plan, scores)
        write_predictor_table(job.output["table"], rows)
        write_model(job.output["result"], result)
        log.info("reason: %s; winners: %s", result.reason, result.best_by_interval)


STAGES = {"validate": validate, "policies": policies, "branches": branches, "load_predictor": load_predictor}


def run_in_snakemake(rule: str, **job: Any) -> None:
    """Run stage `rule` from its rule's `run:` block (input, output, params, wildcards, log, threads, resources)."""
    args = JobArgs.from_snakemake(SimpleNamespace(rule=rule, **job))
    with _ONE_AT_A_TIME:
        STAGES[rule](args)
