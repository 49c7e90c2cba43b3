"""Rule `stress`: finish.json + the branch histories -> stress.json (the top deployments under perturbed step times).

The job's body is `spica_lib.run.jobs.stress`; one of the sweep's pilots (SLURM) or its warm host
runs it when it has them.
"""

from spica_lib.pilot.waiter import run_job

run_job("stress", snakemake)  # noqa: F821 (injected by Snakemake's script directive)
