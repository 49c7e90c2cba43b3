"""Rule `finish_share`: a branch's first-look finish samples, replayed while another branch still searches
-> finish_shares/<branch>.json.

The job's body is `spica_lib.run.finish_share_jobs.finish_share`; one of the sweep's pilots (SLURM) or its
warm host runs it when it has them.
"""

from spica_lib.pilot.waiter import run_job

run_job("finish_share", snakemake)  # noqa: F821 (injected by Snakemake's script directive)
