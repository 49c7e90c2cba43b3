"""Rule `replay`: one replay job of a round -> rounds/<branch>/<k>/trials/<job>/<key>.json, one file per trial.

Who runs the job, and its body, are in its entry of spica_lib/host/registry.py (JOBS["replay"]).
"""

from spica_lib.pilot.rule_script import run_rule

run_rule(snakemake)  # noqa: F821 (injected by Snakemake's script directive)
