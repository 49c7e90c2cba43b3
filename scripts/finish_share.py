"""Rule `finish_share`: a branch's first-look finish samples, replayed while another branch still searches
-> finish_shares/<branch>.json.

Who runs the job, and its body, are in its entry of spica_lib/host/registry.py (JOBS["finish_share"]).
"""

from spica_lib.pilot.rule_script import run_rule

run_rule(snakemake)  # noqa: F821 (injected by Snakemake's script directive)
