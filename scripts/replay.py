"""Rule `replay`: one replay job of a round -> rounds/<branch>/<k>/trials/<job>/<key>.json, one file per trial.

The job's body is `spica_lib.run.jobs.replay`; one of the sweep's pilots (SLURM) or its warm host
runs it when it has them.
"""

from spica_lib.pilot.waiter import run_job

run_job("replay", snakemake)  # noqa: F821 (injected by Snakemake's script directive)
