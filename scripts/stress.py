"""Rule `stress`: finish.json + the branch histories -> stress.json (the top deployments under perturbed step times).

Who runs the job, and its body, are in its entry of spica_lib/host/registry.py (JOBS["stress"]).
"""

from spica_lib.pilot.rule_script import run_rule

run_rule(snakemake)  # noqa: F821 (injected by Snakemake's script directive)
