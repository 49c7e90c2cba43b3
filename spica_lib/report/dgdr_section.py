"""The report's section for a run asked by a DynamoGraphDeploymentRequest: where its answer is, and how it was read.

The request's status (deploy/dgdr.yaml, deploy/dgdr_status.py) carries one selected deployment, as Dynamo's
operator's does; the ranked alternatives and their scores are the report's own tables, since the status's
`pareto` field is deprecated. The mapping lines are the ones `spica validate` prints (config/dgdr.py).
"""

from __future__ import annotations

from spica_lib.run.view import RunView


def dgdr_section(view: RunView) -> str:
    """Empty for a run not asked by a DGDR."""
    source = view.config.dgdr
    if source is None:
        return ""
    name = (source.request.get("metadata") or {}).get("name", "(unnamed)")
    lines = [
        "## The DynamoGraphDeploymentRequest",
        "",
        f"This run answers the DGDR `{name}`. `deploy/dgdr.yaml` holds it with its status: `phase: Ready` (generated, "
        "not applied) and the recommendation, rank 1's DynamoGraphDeployment, as `profilingResults.selectedConfig`. "
        "The alternatives are the ranked deployments above, with their scores, and their files in `deploy/<rank>/` "
        "(the status's `pareto` field is deprecated).",
        "",
        "How its fields were read (DGDR field -> Spica setting):",
        "",
        *[f"- {line}" for line in source.mapping],
    ]
    return "\n".join(lines)
