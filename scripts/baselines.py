"""Rule `baselines`: the final ranking + aiconfigurator's pick -> baselines.json, each baseline replayed.

Who runs the job, and its body, are in its entry of spica_lib/host/registry.py (JOBS["baselines"]).
"""

from spica_lib.pilot.rule_script import run_rule

run_rule(snakemake)  # noqa: F821 (injected by Snakemake's script directive)
