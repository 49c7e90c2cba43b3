"""Rule `finish`: the top deployments replayed again where the replay is not exact -> finish.json.

The job's body is `spica_lib.run.jobs.finish`; the sweep's warm host runs it when there is one.
"""

from spica_lib.host.client import run_job

run_job("finish", snakemake)  # noqa: F821 (injected by Snakemake's script directive)
