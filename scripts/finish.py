"""Rule `finish`: the top deployments replayed again where the replay is not exact -> finish.json.

The job's body is `spica_lib.run.jobs.finish`; one of the sweep's pilots (SLURM) or its warm host
runs it when it has them.
"""

from spica_lib.pilot.waiter import run_job

run_job("finish", snakemake)  # noqa: F821 (injected by Snakemake's script directive)
