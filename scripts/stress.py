"""Rule `stress`: finish.json + the branch histories -> stress.json (the top deployments under perturbed step times).

The job's body is `spica_lib.run.jobs.stress`; the sweep's warm host runs it when there is one.
"""

from spica_lib.host.client import run_job

run_job("stress", snakemake)  # noqa: F821 (injected by Snakemake's script directive)
