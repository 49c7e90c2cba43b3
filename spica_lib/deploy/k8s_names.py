"""Kubernetes names for the deployment files: valid, unique per run and rank, short enough for the operator.

A DynamoGraphDeployment's name is not the only name a cluster sees: the Dynamo operator (1.5 line)
derives others from it, and each has a limit (read in the operator's sources, deploy/operator):

- each component becomes a DynamoComponentDeployment `<dgd>-<component>`, a worker's suffixed with
  the 8-hex-digit hash of the workers' spec during rolling updates (`GetDCDResourceName`,
  `ComputeDGDWorkersSpecHash`), and a Service of the same name: at most 63 characters;
- its pods carry the label `nvidia.com/dynamo-namespace: <namespace>-<dgd>` (`ComputeDynamoNamespace`),
  a label value: at most 63 characters;
- on the Grove pathway the PodCliqueSet (the DGD's name) plus a component's name may not exceed 45
  characters, since the pod names are built from them (`maxCombinedResourceNameLength`);
- component names match `^[A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?$`, unique regardless of case.

The name is `spica-<run>-<rank>`: the run folder's name, made a DNS label (and shortened with a hash
of the exact name when it must change), so the top deployments of one run, and of several runs, can
stand side by side in one namespace. A run asked by a DynamoGraphDeploymentRequest names them after the
request instead, `<metadata.name>-<rank>` by the same rules: the files say which request they answer, and
applying the answer of the same request again updates its deployments rather than adding new ones.
"""

from __future__ import annotations

import hashlib
import re

from spica_lib.config.dgd_override import DGD_COMPONENTS

DEFAULT_NAMESPACE = "default"
MAX_LABEL = 63  # RFC 1123 label, and a label value
GROVE_COMBINED = 45  # PodCliqueSet name + component name
WORKER_HASH = 8  # the operator's worker-spec hash suffix
LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
COMPONENT_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?$")
# Component names: short, so that every derived name above keeps room for the DGD's own name.
COMPONENT = DGD_COMPONENTS  # role -> name; declared with the override rules that name them (config/dgd_override.py)
LONGEST_COMPONENT = max(len(name) for name in COMPONENT.values())
PREFIX = "spica-"  # a run's own deployments; a DGDR's are named after the request


def label_problem(value: str, what: str) -> str | None:
    """Why `value` is not an RFC 1123 label (lowercase letters, digits and '-', at most 63), or None."""
    if not LABEL.match(value) or len(value) > MAX_LABEL:
        return (
            f"{what} {value!r} is not a valid Kubernetes name: use at most {MAX_LABEL} lowercase letters, "
            "digits and '-', starting and ending with a letter or digit (RFC 1123)"
        )
    return None


def check_namespace(namespace: str) -> str:
    """The namespace, or ValueError naming it and the rule (before anything is written)."""
    problem = label_problem(namespace, "namespace")
    if problem is None and _room(namespace) < len(_name("x" * 6, 1)):
        problem = f"namespace {namespace!r} is too long to leave room for a deployment name ({_rules()})"
    if problem:
        raise ValueError(problem)
    return namespace


def deployment_name(run: str, rank: int, namespace: str, request: str | None = None) -> str:
    """`spica-<run>-<rank>`, or `<request>-<rank>` for a run asked by a DGDR named `request`, within every limit
    above for this namespace."""
    room = _room(check_namespace(namespace))
    exact, prefix = (request, "") if request else (run, PREFIX)
    slug = re.sub(r"-+", "-", re.sub(r"[^a-z0-9-]", "-", exact.lower())).strip("-")
    name = _name(slug, rank, prefix)
    if slug != exact or len(name) > room:  # changed or cut: a hash of the exact name keeps it unique
        digest = hashlib.sha256(exact.encode()).hexdigest()[:6]
        keep = room - len(_name(f"-{digest}", rank, prefix))
        name = _name(f"{slug[: max(keep, 0)].strip('-')}-{digest}".strip("-"), rank, prefix)
    return name


def name_problems(dgd: str, namespace: str, components: list[str]) -> list[str]:
    """Every rule above the names of one DGD break."""
    found = [p for p in (label_problem(dgd, "DynamoGraphDeployment name"), label_problem(namespace, "namespace")) if p]
    if len(namespace) + 1 + len(dgd) > MAX_LABEL:
        found.append(f"the Dynamo namespace label {namespace}-{dgd} is over {MAX_LABEL} characters")
    lowered = [c.lower() for c in components]
    for component in components:
        if not COMPONENT_NAME.match(component) or len(component) > MAX_LABEL:
            found.append(f"component name {component!r} does not match {COMPONENT_NAME.pattern}")
        if lowered.count(component.lower()) > 1:
            found.append(f"component name {component!r} is not unique (case-insensitively)")
        if len(f"{dgd}-{component.lower()}-{'0' * WORKER_HASH}") > MAX_LABEL:
            found.append(f"component {component!r}: {dgd}-{component.lower()} plus the worker hash is over {MAX_LABEL}")
        if len(dgd) + len(component) > GROVE_COMBINED:
            found.append(f"component {component!r}: {dgd!r} + {component!r} is over Grove's {GROVE_COMBINED}")
    return found


def _name(slug: str, rank: int, prefix: str = PREFIX) -> str:
    return f"{prefix}{slug}-{rank}"


def _room(namespace: str) -> int:
    """The longest DGD name every derived name keeps within its limit, in this namespace."""
    return min(
        GROVE_COMBINED - LONGEST_COMPONENT,
        MAX_LABEL - 1 - LONGEST_COMPONENT - 1 - WORKER_HASH,
        MAX_LABEL - 1 - len(namespace),
    )


def _rules() -> str:
    return (
        f"the operator labels pods with <namespace>-<deployment>, at most {MAX_LABEL} characters, "
        f"and a deployment name needs at least {len(_name('x' * 6, 1))}"
    )
