"""Rule `aiconfigurator_pick`: the validated config -> baselines/aiconfigurator_pick.json.

Who runs the job, and its body, are in its entry of spica_lib/host/registry.py (JOBS["aiconfigurator_pick"]).
"""

from spica_lib.pilot.rule_script import run_rule

run_rule(snakemake)  # noqa: F821 (injected by Snakemake's script directive)
