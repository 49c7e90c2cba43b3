"""A Kubernetes document's `metadata`, checked by the rules the API server applies to it.

A DynamoGraphDeploymentRequest's name names the deployments Spica writes for it, and its labels are carried
to them (deploy/top.py), so a name or a label the API server would refuse is refused here, by its path,
before any compute, not when the files are written at the end of a run. The rules (Kubernetes' object names
and labels, `k8s.io/apimachinery/pkg/util/validation`):

- `name`: a DNS-1123 subdomain, at most 253 lowercase letters, digits, '-' and '.', starting and ending with
  a letter or digit;
- `namespace`: a DNS-1123 label, the same without '.', at most 63;
- `labels`: string to string; a key is an optional DNS-1123 subdomain prefix and '/', then a name of at most
  63 letters, digits, '-', '_' and '.', starting and ending with a letter or digit; a value is empty or such a
  name;
- `annotations`: string to string, keys as labels' (a number or a boolean in YAML must be quoted).

A null is the key left out (a YAML `labels:` with nothing under it is null).
"""

from __future__ import annotations

import re
from typing import Any

METADATA_KEYS = ("name", "namespace", "labels", "annotations")
MAX_NAME = 253
MAX_LABEL = 63
SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
QUALIFIED_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")


def metadata_problems(metadata: Any, where: str = "metadata") -> list[tuple[str, str]]:
    """Every problem of a document's metadata, as (path, message) pairs; empty when the API server would take it."""
    if metadata is None:
        return []
    if not isinstance(metadata, dict):
        return [(where, f"{metadata!r}: a mapping of {list(METADATA_KEYS)}")]
    found = [(f"{where}.{key}", f"unknown key; allowed keys here: {list(METADATA_KEYS)}")
             for key in metadata if key not in METADATA_KEYS]  # fmt: skip
    name, namespace = metadata.get("name"), metadata.get("namespace")
    if name is not None and not _is_subdomain(name):
        found.append((f"{where}.name", f"{name!r} is not a Kubernetes object name: at most {MAX_NAME} lowercase "
                      "letters, digits, '-' and '.', starting and ending with a letter or digit"))  # fmt: skip
    if namespace is not None and not (isinstance(namespace, str) and DNS_LABEL.match(namespace)
                                      and len(namespace) <= MAX_LABEL):  # fmt: skip
        found.append((f"{where}.namespace", f"{namespace!r} is not a Kubernetes namespace: at most {MAX_LABEL} "
                      "lowercase letters, digits and '-', starting and ending with a letter or digit"))  # fmt: skip
    for kind in ("labels", "annotations"):
        found += _map_problems(metadata.get(kind), f"{where}.{kind}", values_are_names=kind == "labels")
    return found


def _map_problems(given: Any, where: str, values_are_names: bool) -> list[tuple[str, str]]:
    if given is None:
        return []
    if not isinstance(given, dict):
        return [(where, f"{given!r}: a mapping of strings to strings")]
    found = []
    for key, value in given.items():
        problem = _key_problem(key)
        if problem:
            found.append((f"{where}.{key}", problem))
        if not isinstance(value, str):
            found.append((f"{where}.{key}", f"{value!r} is a {type(value).__name__}; Kubernetes takes strings only: "
                          f"quote it ({key}: \"{value}\")"))  # fmt: skip
        elif values_are_names and value and not (QUALIFIED_NAME.match(value) and len(value) <= MAX_LABEL):
            found.append((f"{where}.{key}", f"{value!r} is not a label value: empty, or at most {MAX_LABEL} letters, "
                          "digits, '-', '_' and '.', starting and ending with a letter or digit"))  # fmt: skip
    return found


def _key_problem(key: Any) -> str | None:
    """Why `key` is not a qualified name (`[prefix/]name`), or None."""
    if not isinstance(key, str):
        return f"the key {key!r} is a {type(key).__name__}; keys are strings"
    prefix, _, name = key.rpartition("/")
    if not (QUALIFIED_NAME.match(name) and len(name) <= MAX_LABEL) or ("/" in key and not _is_subdomain(prefix)):
        return (f"the key {key!r} is not a qualified name: an optional DNS subdomain and '/', then at most "
                f"{MAX_LABEL} letters, digits, '-', '_' and '.', starting and ending with a letter or "
                "digit")  # fmt: skip
    return None


def _is_subdomain(value: Any) -> bool:
    return isinstance(value, str) and len(value) <= MAX_NAME and SUBDOMAIN.match(value) is not None
