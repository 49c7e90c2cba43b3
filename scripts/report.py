"""Rule `report`: the run's files -> report/report.md, report/*.png and manifest.json.

Who runs the job, and its body, are in its entry of spica_lib/host/registry.py (JOBS["report"]).
"""

from spica_lib.pilot.rule_script import run_rule

run_rule(snakemake)  # noqa: F821 (injected by Snakemake's script directive)
