"""Checkpoint `refill`: a round's earlier passes and their trials -> rounds/<branch>/<k>/refill/<p>/suggestions.json
and specs/<key>.json, replacements for the last pass's failed or timed-out replays.

Who runs the job, and its body, are in its entry of spica_lib/host/registry.py (JOBS["refill"]).
"""

from spica_lib.pilot.rule_script import run_rule

run_rule(snakemake)  # noqa: F821 (injected by Snakemake's script directive)
