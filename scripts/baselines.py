"""Rule `baselines`: the final ranking + aiconfigurator's pick -> baselines.json, each baseline replayed.

The job's body is `spica_lib.run.jobs.baselines`; the sweep's warm host runs it when there is one.
"""

from spica_lib.host.client import run_job

run_job("baselines", snakemake)  # noqa: F821 (injected by Snakemake's script directive)
