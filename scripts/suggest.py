"""Checkpoint `suggest`: branch + history -> rounds/<branch>/<k>/suggestions.json and the round's specs/<key>.json.

The job's body is `spica_lib.run.jobs.suggest`; the sweep's warm host runs it when there is one.
"""

from spica_lib.host.client import run_job

run_job("suggest", snakemake)  # noqa: F821 (injected by Snakemake's script directive)
