"""Rule `replay`: one replay job of a round -> rounds/<branch>/<k>/trials/<job>/<key>.json, one file per trial.

The job's body is `spica_lib.run.jobs.replay`; the sweep's warm host runs it when there is one.
"""

from spica_lib.host.client import run_job

run_job("replay", snakemake)  # noqa: F821 (injected by Snakemake's script directive)
