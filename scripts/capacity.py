"""Rule `capacity`: finish.json + the branch histories -> capacity.json (the top deployments' load within the SLA).

The job's body is `spica_lib.run.capacity_jobs.capacity`; one of the sweep's pilots (SLURM) or its warm
host runs it when it has them.
"""

from spica_lib.pilot.waiter import run_job

run_job("capacity", snakemake)  # noqa: F821 (injected by Snakemake's script directive)
