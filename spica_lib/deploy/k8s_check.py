"""What a cluster would reject in the deployment files, checked before they are written.

Every document is checked the way the API server and the Dynamo operator's admission would see it:
known fields only (`kubectl apply` validates strictly), each of its type, required fields present,
names within the operator's limits (deploy/k8s_names.py). The schemas come from the installed
packages, not from a copy of ours:

- Kubernetes objects (the benchmark Job, a ConfigMap, each component's `podTemplate`, `metadata`)
  follow the models of the `kubernetes` client ai-dynamo 1.5.1 requires (`openapi_types` and
  `attribute_map` give each field's JSON name and type; a model's constructor refuses a missing
  required field);
- a DynamoGraphDeployment `nvidia.com/v1beta1` has the fields of the wheel's own v1beta1 model
  (`dynamo.profiler.utils.config`: `spec.components`, each with `name`, `type`, `replicas`,
  `podTemplate`, `multinode`, `scalingAdapter`, `runtimeVersionOverride`), and what the operator's
  CRD and admission add to them (deploy/operator/api/v1beta1): a component `type` from its enum,
  `replicas` >= 0, at most 25 components, and a container named `main` with an image in each;
- the NVLink ComputeDomain the generator adds for a worker spanning nodes (NVIDIA's DRA driver's
  CRD, whose schema no installed package holds) is checked for its metadata and its two spec fields.
"""

from __future__ import annotations

import functools
import re
from typing import Any

from spica_lib.base.dynamo_env import prepare_dynamo_import
from spica_lib.deploy.k8s_names import label_problem, name_problems

DGD_API_VERSION = "nvidia.com/v1beta1"
COMPONENT_TYPES = ("frontend", "worker", "prefill", "decode", "planner", "epp")  # the CRD's enum
WORKER_TYPES = ("worker", "prefill", "decode")
MAX_COMPONENTS = 25
GPU = "nvidia.com/gpu"
SEMVER = re.compile(r"^(0|[1-9][0-9]{0,3})\.(0|[1-9][0-9]{0,3})\.(0|[1-9][0-9]{0,3})$")
KNOWN_KINDS = {("batch/v1", "Job"): "V1Job", ("v1", "ConfigMap"): "V1ConfigMap"}
COMPUTE_DOMAIN = ("resource.nvidia.com/v1beta1", "ComputeDomain")  # with a multinode worker (the generator's)


def document_problems(document: dict[str, Any]) -> list[str]:
    """Why the API server (or the Dynamo operator) would refuse this document; empty when it would not."""
    api, kind = document.get("apiVersion"), document.get("kind")
    if (api, kind) == (DGD_API_VERSION, "DynamoGraphDeployment"):
        return dgd_problems(document)
    if (api, kind) == COMPUTE_DOMAIN:  # NVIDIA's DRA driver's CRD: no schema installed, its shape is the generator's
        found = model_problems(document.get("metadata", {}), "V1ObjectMeta", f"{kind}.metadata")
        found += _unknown(document, {"apiVersion", "kind", "metadata", "spec"}, kind)
        return (
            found
            + _unknown(document.get("spec", {}), {"channel", "numNodes"}, f"{kind}.spec")
            + _name_and_namespace(document, kind)
        )
    model = KNOWN_KINDS.get((api, kind))
    if model is None:
        return [f"{api} {kind}: a kind these files do not emit"]
    found = model_problems(document, model, kind)
    found += _name_and_namespace(document, kind)
    if kind == "Job":
        pod = document.get("spec", {}).get("template", {}).get("spec", {})
        if pod.get("restartPolicy") not in ("Never", "OnFailure"):
            found.append("Job: spec.template.spec.restartPolicy must be Never or OnFailure")
        found += [
            f"Job: container {c.get('name')!r} has no image" for c in pod.get("containers", []) if not c.get("image")
        ]
    return found


def dgd_problems(dgd: dict[str, Any]) -> list[str]:
    where = "DynamoGraphDeployment"
    found = _unknown(dgd, {"apiVersion", "kind", "metadata", "spec"}, where)
    found += model_problems(dgd.get("metadata", {}), "V1ObjectMeta", f"{where}.metadata")
    found += _name_and_namespace(dgd, where)
    spec = dgd.get("spec")
    if not isinstance(spec, dict):
        return [*found, f"{where}.spec: missing"]
    found += _unknown(spec, _wheel_fields("Spec"), f"{where}.spec")
    components = spec.get("components")
    if not isinstance(components, list) or not components:
        return [*found, f"{where}.spec.components: must list at least one component"]
    if len(components) > MAX_COMPONENTS:
        found.append(f"{where}.spec.components: {len(components)} components, at most {MAX_COMPONENTS}")
    for index, component in enumerate(components):
        found += _component_problems(component, f"{where}.spec.components[{index}]")
    metadata = dgd.get("metadata", {})
    names = [str(c.get("name")) for c in components if isinstance(c, dict)]
    found += name_problems(str(metadata.get("name")), str(metadata.get("namespace")), names)
    return found


def _component_problems(component: Any, where: str) -> list[str]:
    if not isinstance(component, dict):
        return [f"{where}: not an object"]
    found = _unknown(component, _wheel_fields("Component"), where)
    if not isinstance(component.get("name"), str):
        found.append(f"{where}.name: required, a string")
    kind = component.get("type")
    if kind not in COMPONENT_TYPES:
        found.append(f"{where}.type: {kind!r} is not one of {', '.join(COMPONENT_TYPES)}")
    replicas = component.get("replicas", 1)
    if not _is_int(replicas) or replicas < 0:
        found.append(f"{where}.replicas: {replicas!r} is not an integer >= 0")
    multinode = component.get("multinode")
    if multinode is not None:
        found += _unknown(multinode, _wheel_fields("MultinodeConfig"), f"{where}.multinode")
        if not _is_int(multinode.get("nodeCount")) or multinode["nodeCount"] < 1:
            found.append(f"{where}.multinode.nodeCount: required, an integer >= 1")
    adapter = component.get("scalingAdapter")
    if adapter is not None:  # the wheel's profiler writes {enabled: true}
        found += _unknown(adapter, {"enabled"}, f"{where}.scalingAdapter")
        if not isinstance(adapter.get("enabled", True), bool):
            found.append(f"{where}.scalingAdapter.enabled: not a boolean")
    override = component.get("runtimeVersionOverride")
    if override is not None and not (isinstance(override, str) and SEMVER.match(override)):
        found.append(f"{where}.runtimeVersionOverride: {override!r} is not MAJOR.MINOR.PATCH")
    template = component.get("podTemplate")
    if not isinstance(template, dict):
        return [*found, f"{where}.podTemplate: required for a new component"]
    found += model_problems(template, "V1PodTemplateSpec", f"{where}.podTemplate")
    containers = template.get("spec", {}).get("containers", [])
    main = next((c for c in containers if isinstance(c, dict) and c.get("name") == "main"), None)
    if main is None or not main.get("image"):
        found.append(f"{where}.podTemplate: needs a container named main with an image")
    elif kind in WORKER_TYPES and GPU not in main.get("resources", {}).get("limits", {}):
        found.append(f"{where}: a worker without resources.limits[{GPU!r}]")
    return found


def model_problems(data: Any, model: str, where: str) -> list[str]:
    """`data` against the kubernetes client's model `model`: unknown fields, wrong types, missing required."""
    spec = _model(model)
    if not isinstance(data, dict):
        return [f"{where}: not an object ({model})"]
    json_to_attr = {json: attr for attr, json in spec.attribute_map.items()}
    found = [f"{where}.{key}: unknown field of {model}" for key in data if key not in json_to_attr]
    found += [f"{where}.{spec.attribute_map[attr]}: required" for attr in _required(model) if
              spec.attribute_map[attr] not in data]  # fmt: skip
    for key, value in data.items():
        if key in json_to_attr:
            found += _value_problems(value, spec.openapi_types[json_to_attr[key]], f"{where}.{key}")
    return found


def _value_problems(value: Any, kind: str, where: str) -> list[str]:
    if value is None:
        return []
    if kind.startswith("list["):
        if not isinstance(value, list):
            return [f"{where}: not a list"]
        return [p for i, item in enumerate(value) for p in _value_problems(item, kind[5:-1], f"{where}[{i}]")]
    if kind.startswith("dict("):
        if not isinstance(value, dict):
            return [f"{where}: not an object"]
        inner = kind[5:-1].split(", ", 1)[1]
        return [p for key, item in value.items() for p in _value_problems(item, inner, f"{where}.{key}")]
    primitive = {"str": str, "bool": bool, "float": (int, float), "datetime": str}
    if kind in primitive:
        ok = isinstance(value, primitive[kind]) and not (kind == "float" and isinstance(value, bool))
        return [] if ok else [f"{where}: {value!r} is not a {kind}"]
    if kind == "int":
        return [] if _is_int(value) else [f"{where}: {value!r} is not an integer"]
    if kind == "object":  # int-or-string, a quantity, or free-form
        return []
    return model_problems(value, kind, where)


def _name_and_namespace(document: dict[str, Any], where: str) -> list[str]:
    metadata = document.get("metadata") or {}
    found = [] if metadata.get("name") else [f"{where}.metadata.name: required"]
    for key in ("name", "namespace"):
        if isinstance(metadata.get(key), str):
            problem = label_problem(metadata[key], f"{where} {key}")
            found += [problem] if problem else []
    if not metadata.get("namespace"):
        found.append(f"{where}.metadata.namespace: set it, so the files apply where they were written for")
    return found


def _unknown(data: Any, allowed: set[str], where: str) -> list[str]:
    if not isinstance(data, dict):
        return [f"{where}: not an object"]
    return [f"{where}.{key}: unknown field" for key in data if key not in allowed]


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@functools.cache
def _wheel_fields(name: str) -> set[str]:
    """The JSON field names of one of ai-dynamo's own v1beta1 DGD models."""
    prepare_dynamo_import()
    from dynamo.profiler.utils import config as v1beta1

    fields = getattr(v1beta1, name).model_fields
    return {field.alias or attr for attr, field in fields.items()}


def _model(name: str) -> Any:
    from kubernetes.client import models

    return getattr(models, name)


@functools.cache
def _required(name: str) -> tuple[str, ...]:
    """The model's required attributes: those its constructor refuses to leave unset."""
    spec = _model(name)
    required = []
    for attr in spec.openapi_types:
        try:
            spec(**{other: "x" for other in spec.openapi_types if other != attr})
        except ValueError as refused:
            if f"`{attr}`" in str(refused):
                required.append(attr)
    return tuple(required)
