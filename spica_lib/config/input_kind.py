"""Which kind of document a user handed Spica, told from the document itself.

Spica takes three kinds of YAML: one sweep's `SmartSearchConfig` (search_space, workload, goal, sweep),
a fleet config (an inventory shared by several `models`, each with its own sweep blocks) and Dynamo's
own DynamoGraphDeploymentRequest (a Kubernetes document: `apiVersion` and `kind`). Every front door
(`spica run`, `spica validate`, the Python API, the Snakefile) asks this module first, so a document is
never read as the wrong kind and answered with "unknown key".
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Any

import yaml

from spica_lib.config.strict import ConfigError

DGDR_KIND = "DynamoGraphDeploymentRequest"
DGD_KIND = "DynamoGraphDeployment"
K8S_SUBJECT = "Kubernetes document"  # what a document with apiVersion or kind is called in its errors


class InputKind(StrEnum):
    SWEEP = "sweep"  # one SmartSearchConfig
    FLEET = "fleet"  # several models on one GPU inventory
    DGDR = "dgdr"  # a DynamoGraphDeploymentRequest


def input_kind(data: dict[str, Any], source: str | None = None) -> InputKind:
    """The kind of a document's top-level mapping; a Kubernetes document of another kind is a ConfigError."""
    if "apiVersion" in data or "kind" in data:
        kind = data.get("kind")
        if kind == DGDR_KIND:
            return InputKind.DGDR
        # Named as what it is (a Kubernetes document), not as an invalid Spica config it never claimed to be.
        what = "missing" if kind is None else f"{kind!r} is a Kubernetes kind Spica does not read"
        hint = ""
        if kind == DGD_KIND:
            hint = "; Spica writes DynamoGraphDeployments itself (deploy/<rank>/k8s_deploy.yaml)"
        raise ConfigError([("kind", f"{what}; allowed: {DGDR_KIND!r}{hint}")], source=source, subject=K8S_SUBJECT)
    if "models" in data:
        return InputKind.FLEET
    return InputKind.SWEEP


def read_yaml_mapping(path: Path) -> dict[str, Any]:
    """The mapping at the top of a YAML config file, unvalidated; a ConfigError that names the file when it is
    missing, is not YAML, or holds something other than a mapping."""
    if not path.is_file():
        raise ConfigError([("", f"config file {str(path)!r} does not exist")], source=str(path))
    try:
        with open(path, encoding="utf-8") as handle:
            data = yaml.safe_load(handle)
    except yaml.YAMLError as exc:
        raise ConfigError([("", f"malformed YAML: {exc}")], source=str(path)) from None
    if not isinstance(data, dict):
        kind = "an empty file" if data is None else f"a {type(data).__name__}"
        expected = "a mapping with search_space, workload, goal, sweep (or a fleet config's models)"
        raise ConfigError([("", f"malformed YAML: the top level must be {expected}; got {kind}")], source=str(path))
    return data


def read_input(path: str | Path) -> tuple[InputKind, dict[str, Any]]:
    """A config file's kind and its top-level mapping (unvalidated)."""
    data = read_yaml_mapping(Path(path))
    return input_kind(data, str(path)), data


# What each kind is called, and the door that takes it.
KIND_NAMES = {
    InputKind.SWEEP: "one sweep's config (a SmartSearchConfig)",
    InputKind.FLEET: "a fleet config (it lists `models`)",
    InputKind.DGDR: f"a {DGDR_KIND}",
}
HOW_TO_RUN = {
    InputKind.SWEEP: "run it with `spica run FILE` (from Python: spica_lib.api.run_smart_search)",
    InputKind.FLEET: "run it with `spica run FILE` or `spica fleet FILE` (from Python: spica_lib.fleet.launch.run_fleet)",
    InputKind.DGDR: "run it with `spica run FILE` (from Python: spica_lib.api.run_smart_search)",
}


def wrong_kind_error(kind: InputKind, wanted: InputKind, source: str | None) -> ConfigError:
    """What to say when a document of `kind` reaches a door that reads `wanted` only: one line, naming the door."""
    message = f"this is {KIND_NAMES[kind]}, not {KIND_NAMES[wanted]}: {HOW_TO_RUN[kind]}"
    return ConfigError([("", message)], source=source)
