"""Rule `report`: the run's files -> report/report.md, report/*.png, manifest.json, deploy/<rank>/.

The job's body is `spica_lib.report.job.report`; the sweep's warm host runs it when there is one.
"""

from spica_lib.host.client import run_job

run_job("report", snakemake)  # noqa: F821 (injected by Snakemake's script directive)
