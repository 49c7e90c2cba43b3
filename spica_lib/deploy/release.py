"""The Dynamo release the sweep replayed, as a deployment needs it: its images, container paths and engines.

Everything is read from the installed `ai-dynamo` package, never from a version table of our own:

- the release is `importlib.metadata.version("ai-dynamo")` (1.5.1 with the pinned lock);
- each backend's runtime image and the folder its workers start in come from the wheel's own DGD
  blueprints (`dynamo/profiler/templates/dgd/<backend>/agg.yaml`: `nvcr.io/nvidia/ai-dynamo/
  vllm-runtime:1.5.1`, `workingDir: /workspace/examples/backends/vllm`; TRT-LLM's `/workspace/`);
  the image's tag must be the installed release, or the blueprint is not this release's;
- the planner image is the runtime image with the name the wheel's profiler gives it (`dynamo-planner`);
- the engine each image carries is the one the release pins in its package extras
  (`ai-dynamo[vllm]` requires `vllm==0.28.0`, `[sglang]` `sglang==0.5.18`, `[trtllm]`
  `tensorrt-llm==1.3.0rc25`): the runtime images are built from those extras. Nothing else in the
  wheel records the engines, and aiconfigurator's own table (`generator/facts/runtimes/dynamo.yaml`)
  stops at Dynamo 1.3.0.
"""

from __future__ import annotations

import functools
from importlib import metadata

from packaging.requirements import Requirement
from pydantic import BaseModel, ConfigDict

from spica_lib.base.dynamo_env import prepare_dynamo_import

BACKENDS = ("vllm", "sglang", "trtllm")
ENGINE_PACKAGE = {"vllm": "vllm", "sglang": "sglang", "trtllm": "tensorrt-llm"}  # the engine of each extra
ENGINE_NAME = {"vllm": "vLLM", "sglang": "SGLang", "trtllm": "TensorRT-LLM"}


class BackendRelease(BaseModel):
    """One backend of the installed Dynamo release."""

    model_config = ConfigDict(frozen=True)

    image: str  # the runtime image every component of a deployment on this backend runs
    working_dir: str  # where the release's workers start (the generator's paths are an older tree's)
    engine_version: str | None  # the engine the image carries (the release's package extra), None if unpinned


class DynamoRelease(BaseModel):
    model_config = ConfigDict(frozen=True)

    version: str
    planner_image: str
    backends: dict[str, BackendRelease]


@functools.cache
def installed_release() -> DynamoRelease:
    """The installed ai-dynamo release, read once per process."""
    prepare_dynamo_import()
    from dynamo.profiler.utils.dgd_template import load_dgd_template
    from dynamo.profiler.utils.profile_common import derive_planner_image

    version = metadata.version("ai-dynamo")
    engines = _engine_versions()
    backends = {}
    for backend in BACKENDS:
        image, working_dir = _worker_container(load_dgd_template(backend, "agg"))
        if image.rpartition(":")[2] != version:
            raise RuntimeError(
                f"ai-dynamo {version}'s {backend} DGD blueprint names image {image}, not a {version} image"
            )
        backends[backend] = BackendRelease(image=image, working_dir=working_dir, engine_version=engines.get(backend))
    planner = derive_planner_image(backends["vllm"].image)
    return DynamoRelease(version=version, planner_image=planner, backends=backends)


def _worker_container(blueprint: dict) -> tuple[str, str]:
    for component in blueprint["spec"]["components"]:
        if component.get("type") == "worker":
            main = next(c for c in component["podTemplate"]["spec"]["containers"] if c["name"] == "main")
            return main["image"], main["workingDir"]
    raise RuntimeError("the wheel's agg DGD blueprint has no worker component")


def _engine_versions() -> dict[str, str]:
    """Backend -> the engine version its `ai-dynamo[<backend>]` extra pins (`==`)."""
    out = {}
    for line in metadata.requires("ai-dynamo") or []:
        requirement = Requirement(line)
        for backend, package in ENGINE_PACKAGE.items():
            pinned = [spec.version for spec in requirement.specifier if spec.operator == "=="]
            in_extra = requirement.marker is not None and requirement.marker.evaluate({"extra": backend})
            if requirement.name == package and in_extra and pinned:
                out[backend] = pinned[0]
    return out
