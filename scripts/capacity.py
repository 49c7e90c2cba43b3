"""Rule `capacity`: finish.json + the branch histories -> capacity.json (the top deployments' load within the SLA).

Who runs the job, and its body, are in its entry of spica_lib/host/registry.py (JOBS["capacity"]).
"""

from spica_lib.pilot.rule_script import run_rule

run_rule(snakemake)  # noqa: F821 (injected by Snakemake's script directive)
