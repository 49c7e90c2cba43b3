"""`deploy/dgdr.yaml`: the DynamoGraphDeploymentRequest a run answered, with the status Dynamo's operator gives one.

When a run's input was a DGDR, its answer is written back in the request's own terms, beside the deployment
files: the request as given, with a `status` of the operator's types (`dgdr_v1beta1_types`):

- `phase: Ready`: the deployment is generated, not applied (Spica applies nothing; `Failed` when the
  recommended deployment's files could not be written, and why is in its deploy.json);
- `dgdName` and `profilingResults.selectedConfig`: the recommended (rank 1) DynamoGraphDeployment, as written
  in `deploy/1/k8s_deploy.yaml`: named after the request (`<metadata.name>-1`, deploy/k8s_names.py), with its
  labels, and its `overrides.dgd` merged in (config/dgd_override.py);
- no `profilingPhase`: the operator clears it once profiling is over; no `pareto`: the field is deprecated,
  so the ranked alternatives and their scores are in the report (report.md) and deploy/<rank>/.

The document is read back by Spica's strict check of a DGDR and validated by the wheel's types before it is
written; one that would not pass is not written.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from spica_lib.base.artifacts import atomic_write_text
from spica_lib.config import SmartSearchConfig
from spica_lib.config.dgd_override import merge_override
from spica_lib.config.dgdr_request import request_problems

DGDR_FILE = "dgdr.yaml"


def as_requested(dgd: dict[str, Any], config: SmartSearchConfig) -> dict[str, Any]:
    """The DGD as the request asks for it (itself for a run not asked by a DGDR): the request's `metadata.labels`
    carried to it, then its `overrides.dgd` merged in (whose labels win: they are about the deployment alone);
    an override's component the deployment does not have is left out of it."""
    if config.dgdr is None:
        return dgd
    labels = config.dgdr.labels
    if labels:
        dgd = {**dgd, "metadata": {**dgd["metadata"], "labels": {**labels, **(dgd["metadata"].get("labels") or {})}}}
    override = config.dgdr.dgd_override
    return dgd if override is None else merge_override(dgd, override)[0]


def dgdr_status(request: dict[str, Any], selected: dict[str, Any] | None) -> dict[str, Any]:
    """The request with its status: Ready with the selected DGD, or Failed without one."""
    status: dict[str, Any] = {"phase": "Failed"}
    if selected is not None:
        status = {
            "phase": "Ready",
            "dgdName": selected["metadata"]["name"],
            "profilingResults": {"selectedConfig": selected},
        }
    return {**{key: value for key, value in request.items() if key != "status"}, "status": status}


def write_dgdr_status(
    config: SmartSearchConfig, deploy_dir: str | Path, selected: dict[str, Any] | None
) -> Path | None:
    """deploy/dgdr.yaml for a run mapped from a DGDR (None for any other run); ValueError if it would not validate."""
    if config.dgdr is None:
        return None
    document = dgdr_status(config.dgdr.request, selected)
    problems = request_problems(document, status=True)
    if problems:
        raise ValueError("deploy/dgdr.yaml would not validate: " + "; ".join(f"{p}: {m}" for p, m in problems))
    path = Path(deploy_dir) / DGDR_FILE
    atomic_write_text(path, yaml.safe_dump(document, sort_keys=False, width=120))
    return path
