"""Rule `fleet_plan`: each model's finished sweep -> the inventory's split, confirmed by replays -> fleet.json.

Who runs the job, and its body, are in its entry of spica_lib/host/registry.py (JOBS["fleet_plan"]).
"""

from spica_lib.pilot.rule_script import run_rule

run_rule(snakemake)  # noqa: F821 (injected by Snakemake's script directive)
