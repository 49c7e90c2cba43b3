"""Rule `baselines`: the final ranking + aiconfigurator's pick -> baselines.json, each baseline replayed.

The job's body is `spica_lib.run.jobs.baselines`; one of the sweep's pilots (SLURM) or its warm host
runs it when it has them.
"""

from spica_lib.pilot.waiter import run_job

run_job("baselines", snakemake)  # noqa: F821 (injected by Snakemake's script directive)
