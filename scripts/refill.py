"""Checkpoint `refill`: a round's earlier passes and their trials -> rounds/<branch>/<k>/refill/<p>/suggestions.json
and specs/<key>.json, replacements for the last pass's failed or timed-out replays.

The job's body is `spica_lib.run.jobs.refill`; the sweep's warm host runs it when there is one.
"""

from spica_lib.host.client import run_job

run_job("refill", snakemake)  # noqa: F821 (injected by Snakemake's script directive)
