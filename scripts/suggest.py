"""Checkpoint `suggest`: branch + history -> rounds/<branch>/<k>/suggestions.json and the round's specs/<key>.json.

Who runs the job, and its body, are in its entry of spica_lib/host/registry.py (JOBS["suggest"]).
"""

from spica_lib.pilot.rule_script import run_rule

run_rule(snakemake)  # noqa: F821 (injected by Snakemake's script directive)
