"""Rule `merge`: branch histories + trial files -> candidates.parquet, ranked.csv | pareto.csv, summary.json.

The job's body is `spica_lib.run.jobs.merge`; the sweep's warm host runs it when there is one.
"""

from spica_lib.host.client import run_job

run_job("merge", snakemake)  # noqa: F821 (injected by Snakemake's script directive)
