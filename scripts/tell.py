"""Rule `tell`: suggestions + trial files -> rounds/<branch>/<k>/observations.json (the branch history).

Who runs the job, and its body, are in its entry of spica_lib/host/registry.py (JOBS["tell"]).
"""

from spica_lib.pilot.rule_script import run_rule

run_rule(snakemake)  # noqa: F821 (injected by Snakemake's script directive)
