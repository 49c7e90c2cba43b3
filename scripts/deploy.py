"""Rule `deploy`: the run's ranked files -> deploy/<rank>/, the top deployments' files for a cluster.

Who runs the job, and its body, are in its entry of spica_lib/host/registry.py (JOBS["deploy"]).
"""

from spica_lib.pilot.rule_script import run_rule

run_rule(snakemake)  # noqa: F821 (injected by Snakemake's script directive)
