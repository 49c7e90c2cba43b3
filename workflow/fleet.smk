# Spica fleet: one GPU inventory, several models -> each model's sweep -> the split, confirmed -> report.
#
#   snakemake --snakefile workflow/fleet.smk --cores 2 --config fleet=config/examples/fleet_models.yaml [run=NAME]
#   (or `spica fleet FILE`)
#
# The fleet config is checked while this file is parsed (every model's config, catalog, layouts, and an
# inventory that holds each model's smallest deployment), before any job runs or anything is written.
# Each model is a wildcard: its sweep is the single-model workflow (workflow/Snakefile) run in the fleet's
# folder with root models/, so it resumes and takes the same profile; `sweep_profile=` passes one on.

import sys

PYTHON = sys.executable


include: "rules/common.smk"


from spica_lib.config import ConfigError
from spica_lib.fleet.layout import prepare_fleet

try:
    RECORD, FLEET, PLANS = prepare_fleet(str(config["fleet"]), run=config.get("run"))
except KeyError:
    stop_for("give the fleet config: --config fleet=FILE")
except ConfigError as error:
    stop_for(error)

wildcard_constraints:
    model="|".join(FLEET.models),

# Each job's memory and where it runs, from its one declaration (spica_lib/host/registry.py): a confirming
# replay needs what the model's largest workload needs (spica_lib/run/job_memory.py). The fleet's own workflow
# starts no pilots.
from spica_lib.host.rule_asks import RuleSizes
from spica_lib.run.job_memory import largest_input_tokens, replay_mb

REPLAY_MB = max(replay_mb(largest_input_tokens(plan.config)) for plan in PLANS)
SIZES = RuleSizes(lambda name: REPLAY_MB)


onsuccess:
    # A fleet with no plan has failed its user, whatever the jobs did: exit 1, say why (as a sweep does).
    from spica_lib.fleet.plan import no_plan

    fail_for(no_plan(FLEET.fleet_json))


rule all:
    default_target: True
    input:
        FLEET.fleet_json,
        FLEET.report_md,
        FLEET.deploy_dir,


rule fleet_setup:
    message:
        "Writing the fleet's record and each model's config"
    output:
        record=FLEET.record_json,
        configs=[FLEET.model_config_yaml(m) for m in FLEET.models],
    localrule: True
    run:
        from spica_lib.fleet.jobs import write_setup

        write_setup(RECORD, FLEET, PLANS)


rule model_sweep:
    message:
        "Sweeping model {wildcards.model} (its own Snakemake; its log: {params.sweep_log})"
    input:
        config=FLEET.model_config_yaml("{model}"),
    output:
        done=FLEET.model_done("{model}"),
    log:
        FLEET.log("sweep-{model}"),
    threads: workflow.cores  # one model's sweep at a time uses every core (its own replays run in parallel)
    params:
        fleet_dir=FLEET.dir,
        sweep_log=lambda wildcards: FLEET.model_run(wildcards.model).snakemake_log,
        profile=f"--profile {config['sweep_profile']}" if config.get("sweep_profile") else "",
    localrule: True  # it only waits: its sweep's jobs go where the sweep's profile sends them
    shell:
        "{PYTHON} -m spica_lib.fleet.jobs {params.fleet_dir} {wildcards.model} --cores {threads} {params.profile} "
        "2> >(tee {log} >&2)"


rule fleet_plan:
    message:
        "Splitting the inventory between the models; confirming the plan by replays"
    input:
        record=FLEET.record_json,
        done=[FLEET.model_done(m) for m in FLEET.models],
    output:
        plan=FLEET.fleet_json,
    log:
        FLEET.log("plan"),
    params:
        fleet_dir=FLEET.dir,
    threads: workflow.cores
    resources:
        mem_mb=job_mem_mb("fleet_plan"),
    localrule: job_is_local("fleet_plan")
    script:
        "../scripts/fleet_plan.py"


rule fleet_report:
    message:
        "Writing the fleet's report and deployment files"
    input:
        plan=FLEET.fleet_json,
    output:
        report=FLEET.report_md,
        deploy=directory(FLEET.deploy_dir),
    localrule: True
    run:
        from spica_lib.base.artifacts import read_model
        from spica_lib.fleet.plan import FleetPlan
        from spica_lib.fleet.report import write_fleet_report

        write_fleet_report(FLEET, read_model(input.plan, FleetPlan), config.get("namespace", "default"))
