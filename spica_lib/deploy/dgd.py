"""The DynamoGraphDeployment as the operator stores it: `nvidia.com/v1beta1`, built as data.

Why v1beta1 and not v1alpha1 with the conversion webhook (facts checked on the pinned stack):

- the Dynamo operator of the 1.5 line stores v1beta1 (`+kubebuilder:storageversion` on its v1beta1
  types) and serves v1alpha1 as deprecated, converting it through its webhook: an applied v1alpha1
  object is stored as something else than the file says (a `kubectl diff` is never clean), and
  applying it depends on the webhook being up;
- the planner of ai-dynamo 1.5.1 reads and scales the deployment through v1beta1 only
  (`dynamo/planner/connectors/clients/kubernetes_api.py`: `DYNAMO_API_VERSION = "v1beta1"`; it
  finds workers in `spec.components` by `type`);
- Dynamo 1.5.1's own profiler writes v1beta1 (its blueprints `dynamo/profiler/templates/dgd/`, its
  model `dynamo.profiler.utils.config`), the shape k8s_check.py checks against.

aiconfigurator 0.12.0's generator writes v1alpha1 only (its typed model `dgd_model.py`), so each of
its services is mapped onto a v1beta1 component, field by field, as data:

    v1alpha1 service                      v1beta1 component
    componentType / subComponentType      type: frontend, worker (agg), prefill, decode, planner
    replicas, multinode                   the same
    extraPodSpec (a PodSpec overlay)      podTemplate.spec; its mainContainer is the container `main`
    labels, annotations                   podTemplate.metadata
    envFromSecret, envs                   main's envFrom (a secretRef) and env (before its own)
    resources.limits.gpu and .custom      main's resources.limits `nvidia.com/gpu` and the custom names
    sharedMemory                          not carried: the wheel's v1beta1 model has no such field, and
                                          Dynamo's own 1.5.1 blueprints leave /dev/shm to the operator

A service field outside this table is an error, not a silent loss. Component names are short
(deploy/k8s_names.py), images are the installed release's, workers start in its folder
(deploy/release.py), and each worker is pinned to the GPU type its role was replayed on.
"""

from __future__ import annotations

import copy
from typing import Any

from spica_lib.deploy.k8s_names import COMPONENT
from spica_lib.deploy.release import installed_release
from spica_lib.deploy.replayed import Replayed

DGD_API_VERSION = "nvidia.com/v1beta1"
GPU = "nvidia.com/gpu"
GPU_TYPE_LABEL = "spica.dev/gpu-sku"  # on each worker's pods: the GPU type its role was replayed on
SERVICE_FIELDS = {
    "componentType", "subComponentType", "replicas", "multinode", "extraPodSpec", "labels", "annotations",
    "envFromSecret", "envs", "resources", "sharedMemory",
}  # fmt: skip
SCALED_BY_PLANNER = {"agg": ("worker",), "disagg": ("prefill", "decode")}


def v1beta1_documents(
    generated: list[dict[str, Any]], played: Replayed, *, name: str, namespace: str, skus: dict[str, str],
    annotations: dict[str, str], gpus_per_node: int,
) -> list[dict[str, Any]]:  # fmt: skip
    """The generator's documents with its v1alpha1 DGD made the v1beta1 one (the others as they are)."""
    dgd, others = generated[0], generated[1:]
    if dgd.get("kind") != "DynamoGraphDeployment":
        raise ValueError(f"the generator's first document is a {dgd.get('kind')}, not a DynamoGraphDeployment")
    components = [_component(service, played, skus, gpus_per_node) for service in dgd["spec"]["services"].values()]
    if not any("multinode" in component for component in components):
        others = [other for other in others if other.get("kind") != "ComputeDomain"]
        for component in components:
            _drop_compute_domain(component["podTemplate"]["spec"])
    if played.planner is not None:
        for component in components:
            if component["type"] in SCALED_BY_PLANNER[played.mode]:
                component["scalingAdapter"] = {"enabled": True}  # as Dynamo's profiler opts planner-scaled workers in
    beta = {
        "apiVersion": DGD_API_VERSION,
        "kind": "DynamoGraphDeployment",
        "metadata": {"name": name, "namespace": namespace, "annotations": dict(annotations)},
        "spec": {"components": components},
    }
    for other in others:
        other.setdefault("metadata", {})["namespace"] = namespace
    return [beta, *others]


def _component(service: dict[str, Any], played: Replayed, skus: dict[str, str], gpus_per_node: int) -> dict[str, Any]:
    unknown = set(service) - SERVICE_FIELDS
    if unknown:
        raise ValueError(f"a generated service has fields the v1beta1 mapping does not know: {sorted(unknown)}")
    role = _role(service)
    release = installed_release()
    pod = copy.deepcopy(service.get("extraPodSpec") or {})
    main = pod.pop("mainContainer", None) or {}
    main = {"name": "main", **main}
    if role == "planner":
        main["image"] = release.planner_image
    else:
        main["image"] = release.backends[played.backend].image
    if role in played.roles and main.get("workingDir"):
        main["workingDir"] = release.backends[played.backend].working_dir
    if service.get("envs"):
        main["env"] = [*service["envs"], *(main.get("env") or [])]
    if service.get("envFromSecret"):
        main["envFrom"] = [{"secretRef": {"name": service["envFromSecret"]}}, *(main.get("envFrom") or [])]
    resources = _resources(service.get("resources"))
    component: dict[str, Any] = {"name": COMPONENT[role], "type": _type(role), "replicas": service.get("replicas", 1)}
    if service.get("multinode"):
        component["multinode"] = dict(service["multinode"])
    if role in played.roles:
        _replayed_gpus(component, resources, played.roles[role].gpus, gpus_per_node)
    if resources:
        main["resources"] = resources
    metadata = {key: dict(service[key]) for key in ("labels", "annotations") if service.get(key)}
    if role in played.roles:
        _pin_gpu_type(pod, metadata, skus[role])
    template: dict[str, Any] = {"spec": {**pod, "containers": [main, *pod.get("containers", [])]}}
    if metadata:
        template = {"metadata": metadata, **template}
    component["podTemplate"] = template
    return component


def _role(service: dict[str, Any]) -> str:
    kind = service.get("componentType")
    if kind == "worker":
        return service.get("subComponentType") or "agg"
    if kind in ("frontend", "planner"):
        return kind
    raise ValueError(f"a generated service of componentType {kind!r}, which these files do not deploy")


def _type(role: str) -> str:
    return "worker" if role == "agg" else role


def _resources(resources: dict[str, Any] | None) -> dict[str, Any]:
    """v1alpha1's `{limits: {gpu, custom: {...}}, claims}` as a container's resource requirements."""
    out: dict[str, Any] = {}
    for bound in ("requests", "limits"):
        given = dict((resources or {}).get(bound) or {})
        if not given:
            continue
        named = {GPU: str(given.pop("gpu"))} if "gpu" in given else {}
        named.update({key: str(value) for key, value in (given.pop("custom", None) or {}).items()})
        named.update({key: str(value) for key, value in given.items()})  # cpu, memory as they are
        out[bound] = named
    if (resources or {}).get("claims"):
        out["claims"] = copy.deepcopy(resources["claims"])
    return out


def _replayed_gpus(component: dict[str, Any], resources: dict[str, Any], gpus: int, per_node: int) -> None:
    """A worker's GPUs as replayed, split over nodes as the generator splits them.

    The generator counts TP x PP x DP GPUs after its rules set an SGLang or TRT-LLM MoE worker's TP to
    the expert width; with attention DP that counts the data-parallel ranks twice (4 GPUs become 16,
    and a multinode worker). The replayed layout's count is the engine's: `--tp` covers the DP ranks.
    """
    nodes = -(-gpus // per_node)
    resources.setdefault("limits", {})[GPU] = str(gpus if nodes == 1 else per_node)
    if nodes == 1:
        component.pop("multinode", None)
    else:
        component["multinode"] = {"nodeCount": nodes}


def _drop_compute_domain(pod: dict[str, Any]) -> None:
    """Without a multinode worker, the generator's NVLink compute-domain claims have nothing to claim."""
    claims = [c for c in pod.get("resourceClaims", []) if not str(c.get("name", "")).startswith("compute-domain")]
    if claims:
        pod["resourceClaims"] = claims
    else:
        pod.pop("resourceClaims", None)
    for container in pod.get("containers", []):
        resources = container.get("resources", {})
        kept = [c for c in resources.get("claims", []) if not str(c.get("name", "")).startswith("compute-domain")]
        if kept:
            resources["claims"] = kept
        else:
            resources.pop("claims", None)


def _pin_gpu_type(pod: dict[str, Any], metadata: dict[str, Any], sku: str) -> None:
    """Schedule a worker on its role's GPU type, with the node labels aiconfigurator's facts give that type."""
    selector = gpu_node_selector(sku)
    if selector is None:
        pod.pop("nodeSelector", None)  # another type's labels would put this role on the wrong GPUs
    else:
        pod["nodeSelector"] = selector
    metadata.setdefault("labels", {})[GPU_TYPE_LABEL] = sku


def gpu_node_selector(sku: str) -> dict[str, str] | None:
    """The node labels aiconfigurator's generator schedules a GPU type's workers with (its hardware facts)."""
    from pathlib import Path

    import yaml
    from aiconfigurator.generator.facts import request_resolution

    facts = Path(request_resolution.__file__).with_name("hardware.yaml")
    profiles = (yaml.safe_load(facts.read_text(encoding="utf-8")) or {}).get("profiles", {})
    profile = profiles.get(request_resolution.hardware_key_for_system(sku)) or {}
    return dict(profile["node_selector"]) if profile.get("node_selector") else None


def components_by_role(dgd: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """A v1beta1 DGD's components keyed by role (agg, prefill, decode, frontend, planner)."""
    role_of = {"worker": "agg"}
    return {role_of.get(c.get("type"), c.get("type")): c for c in dgd.get("spec", {}).get("components", [])}


def main_container(component: dict[str, Any]) -> dict[str, Any]:
    containers = component.get("podTemplate", {}).get("spec", {}).get("containers", [])
    return next((c for c in containers if c.get("name") == "main"), {})
