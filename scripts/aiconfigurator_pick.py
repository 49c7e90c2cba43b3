"""Rule `aiconfigurator_pick`: the validated config -> baselines/aiconfigurator_pick.json.

The job's body is `spica_lib.run.jobs.aiconfigurator_pick`; the sweep's warm host runs it when there is one.
"""

from spica_lib.host.client import run_job

run_job("aiconfigurator_pick", snakemake)  # noqa: F821 (injected by Snakemake's script directive)
