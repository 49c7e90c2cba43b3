"""Rule `merge`: branch histories + trial files -> candidates.parquet, ranked.csv | pareto.csv, summary.json.

Who runs the job, and its body, are in its entry of spica_lib/host/registry.py (JOBS["merge"]).
"""

from spica_lib.pilot.rule_script import run_rule

run_rule(snakemake)  # noqa: F821 (injected by Snakemake's script directive)
