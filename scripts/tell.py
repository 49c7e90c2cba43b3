"""Rule `tell`: suggestions + trial files -> rounds/<branch>/<k>/observations.json (the branch history).

The job's body is `spica_lib.run.jobs.tell`; the sweep's warm host runs it when there is one.
"""

from spica_lib.host.client import run_job

run_job("tell", snakemake)  # noqa: F821 (injected by Snakemake's script directive)
