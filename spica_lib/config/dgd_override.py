"""A DGDR's `overrides.dgd`: Spica's own merge of a partial DynamoGraphDeployment into every DGD it writes.

Dynamo's profiler merges the override through a Go binary the pinned wheel does not ship, so Spica
merges it itself, by rules it states here and checks before any compute:

- the override is a partial `nvidia.com/v1beta1` DynamoGraphDeployment (Spica writes v1beta1 and
  converts nothing); its `metadata.labels` and `metadata.annotations` are merged, its `spec.components`
  name the components to change (`frontend`, `worker`, `prefill`, `decode`, `planner`);
- mappings merge key by key; a list whose items all carry a `name` (components, containers, env,
  volumes, volumeMounts) merges item by item by that name, a new name appended; any other list or
  value replaces the generated one;
- a component the deployment does not have (a `prefill` in an aggregated one) is left out of that one;
- a path that would change what was replayed is refused by its path: a component's `type`, `replicas`,
  `multinode` and `scalingAdapter`, the main container's `command` and `args` (the engine's, router's
  and planner's flags), its GPUs, the node selector that pins the GPU type, the router's `DYN_ROUTER*`
  environment, and the DGD's name and namespace (Spica names each ranked deployment, and writes it
  for a namespace: `spica report --namespace`).

The merged document is checked as every deployment file is (deploy/k8s_check.py) before it is written.
"""

from __future__ import annotations

import copy
from typing import Any

DGD_API_VERSION = "nvidia.com/v1beta1"
DGD_KIND = "DynamoGraphDeployment"
# The DynamoGraphDeployment's component names, by role: the one table (deploy/k8s_names.py reads it).
DGD_COMPONENTS = {
    "frontend": "frontend", "agg": "worker", "prefill": "prefill", "decode": "decode", "planner": "planner",
}  # fmt: skip
GPU = "nvidia.com/gpu"
GPU_TYPE_LABELS = ("nvidia.com/gpu.product", "spica.dev/gpu-sku")  # the node selector and the pod label Spica pins
COMPONENT_REFUSED = {
    "type": "the component's role is the replayed deployment's",
    "replicas": "the worker counts are the replayed ones (the planner, when replayed, scales them)",
    "multinode": "a worker's nodes follow from its replayed GPUs and the node size",
    "scalingAdapter": "it is set where the replayed planner scales the workers",
}
MAIN_REFUSED = {
    "command": "the main container's command carries the replayed engine, router and planner flags",
    "args": "the main container's arguments carry the replayed engine, router and planner flags",
}


def override_problems(override: Any, where: str) -> list[tuple[str, str]]:
    """Why this `overrides.dgd` cannot be merged into Spica's DGDs, as (path, message) pairs; empty when it can."""
    if not isinstance(override, dict):
        return [(where, f"a partial DynamoGraphDeployment (a mapping), got {type(override).__name__}")]
    found: list[tuple[str, str]] = []
    if override.get("apiVersion") != DGD_API_VERSION:
        found.append((f"{where}.apiVersion", f"{override.get('apiVersion')!r}: Spica writes and merges "
                      f"{DGD_API_VERSION!r} only (it converts no v1alpha1 override)"))  # fmt: skip
    if override.get("kind") != DGD_KIND:
        found.append((f"{where}.kind", f"{override.get('kind')!r}; allowed: {DGD_KIND!r}"))
    found += _unknown(override, ("apiVersion", "kind", "metadata", "spec"), where)
    metadata = override.get("metadata") or {}
    for key in metadata:
        if key in ("name", "namespace"):
            found.append((f"{where}.metadata.{key}", "refused: Spica names each ranked deployment after the request, "
                          "<metadata.name>-<rank>, in the namespace it writes the files for (`spica report "
                          "--namespace`); name the request instead"))  # fmt: skip
        elif key not in ("labels", "annotations"):
            found.append((f"{where}.metadata.{key}", "unknown key; allowed keys here: ['labels', 'annotations']"))
    spec = override.get("spec") or {}
    found += _unknown(spec, ("components",), f"{where}.spec")
    components = spec.get("components") or []
    if not isinstance(components, list):
        return [*found, (f"{where}.spec.components", "a list of components, each with a name")]
    names = list(DGD_COMPONENTS.values())
    for index, component in enumerate(components):
        found += _component_problems(component, f"{where}.spec.components[{index}]", names)
    return found


def _component_problems(component: Any, where: str, names: list[str]) -> list[tuple[str, str]]:
    if not isinstance(component, dict) or component.get("name") not in names:
        got = component.get("name") if isinstance(component, dict) else component
        return [(f"{where}.name", f"{got!r}: a component is named by the one it changes; Spica's are {names}")]
    found = [(f"{where}.{key}", f"refused: {why}") for key, why in COMPONENT_REFUSED.items() if key in component]
    pod = (component.get("podTemplate") or {}).get("spec") or {}
    selector = pod.get("nodeSelector") or {}
    labels = ((component.get("podTemplate") or {}).get("metadata") or {}).get("labels") or {}
    for key in GPU_TYPE_LABELS:
        for kind, given in (("spec.nodeSelector", selector), ("metadata.labels", labels)):
            if key in given:
                why = "refused: it pins the GPU type the role was replayed on"
                found.append((f"{where}.podTemplate.{kind}.{key}", why))
    for index, container in enumerate(pod.get("containers") or []):
        path = f"{where}.podTemplate.spec.containers[{index}]"
        if not isinstance(container, dict):
            continue
        for variable in container.get("env") or []:
            if isinstance(variable, dict) and str(variable.get("name", "")).startswith("DYN_ROUTER"):
                found.append((f"{path}.env.{variable['name']}", "refused: the router's settings are the replayed ones"))
        if container.get("name") != "main":
            continue
        found += [(f"{path}.{key}", f"refused: {why}") for key, why in MAIN_REFUSED.items() if key in container]
        for bound in ("limits", "requests"):
            if GPU in ((container.get("resources") or {}).get(bound) or {}):
                found.append((f"{path}.resources.{bound}.{GPU}", "refused: the worker's GPUs are the replayed ones"))
    return found


def _unknown(data: Any, allowed: tuple[str, ...], where: str) -> list[tuple[str, str]]:
    if not isinstance(data, dict):
        return [(where, "not a mapping")]
    message = f"unknown key; allowed keys here: {list(allowed)}"
    return [(f"{where}.{key}", message) for key in data if key not in allowed]


def merge_override(dgd: dict[str, Any], override: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The DGD with the override merged in (a new document), and the override's components it does not have."""
    merged = copy.deepcopy(dgd)
    metadata = override.get("metadata") or {}
    for key in ("labels", "annotations"):
        if metadata.get(key):
            merged.setdefault("metadata", {})[key] = _merge(merged["metadata"].get(key) or {}, metadata[key])
    present = {component["name"]: component for component in merged["spec"]["components"]}
    absent = []
    for component in (override.get("spec") or {}).get("components") or []:
        target = present.get(component["name"])
        if target is None:
            absent.append(component["name"])
            continue
        target.update(_merge(target, component))
    return merged, absent


def _merge(base: Any, change: Any) -> Any:
    if isinstance(base, dict) and isinstance(change, dict):
        out = dict(base)
        for key, value in change.items():
            out[key] = _merge(base[key], value) if key in base else copy.deepcopy(value)
        return out
    if _named(base) and _named(change):
        out = [copy.deepcopy(item) for item in base]
        index = {item["name"]: position for position, item in enumerate(out)}
        for item in change:
            if item["name"] in index:
                out[index[item["name"]]] = _merge(out[index[item["name"]]], item)
            else:
                out.append(copy.deepcopy(item))
        return out
    return copy.deepcopy(change)


def _named(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(item, dict) and "name" in item for item in value)
