"""Rule `load_predictor_score`: one candidate at one interval -> load_predictor/scores/<interval>/<label>.json.

Who runs the job, and its body, are in its entry of spica_lib/host/registry.py (JOBS["load_predictor_score"]).
"""

from spica_lib.pilot.rule_script import run_rule

run_rule(snakemake)  # noqa: F821 (injected by Snakemake's script directive)
