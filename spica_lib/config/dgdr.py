"""A DynamoGraphDeploymentRequest read as Spica's question: strictly, then by Dynamo's own types, then mapped.

The pinned wheel's DGDR types (`dynamo.profiler.utils.dgdr_v1beta1_types`) are lenient: they ignore
`apiVersion`, `kind` and `metadata`, drop unknown keys (a typo like `workload.islx` vanishes), accept both
`concurrency` and `requestRate`, and fill `itl: 30` when only `ttft` is given. So a DGDR is read here in
three steps, every problem named by the DGDR field's path before anything runs:

1. Spica's own check: `apiVersion: nvidia.com/v1beta1`, the kind, `spec` present, and every key known to
   the wheel's models (an unknown key anywhere is refused by its path);
2. the wheel's types (`DynamoGraphDeploymentRequest`), for the values: enums, numbers, the SLA's options;
3. the mapping onto a `SmartSearchConfig` (docs/dgdr.md): what a DGDR cannot say (the
   engine, router-weight and planner knob lists, the traffic's length) comes from Spica's default question,
   config/default.yaml, and every defaulted or reinterpreted field is written down, one line each
   ("DGDR field -> Spica setting"), in the config's `dgdr` block, with the DGDR path each setting came from
   so that a problem found later is still named by the DGDR's field.

The features (router and planner) are mapped in config/dgdr_features.py, `overrides.dgd` checked in
config/dgd_override.py.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from spica_lib.base.dynamo_env import prepare_dynamo_import
from spica_lib.config.dgd_override import override_problems
from spica_lib.config.dgdr_features import map_features, planner_key_problems
from spica_lib.config.fields import BACKENDS
from spica_lib.config.input_kind import DGDR_KIND
from spica_lib.config.strict import ConfigError, StrictModel, problems_from
from spica_lib.facts.catalog import model_source, resolve_backend_version
from spica_lib.facts.hardware import model_facts, system_facts

DGDR_API_VERSION = "nvidia.com/v1beta1"
SUBJECT = DGDR_KIND
T = TypeVar("T")
# Spica's default question: what a DGDR cannot say is asked as it asks it (knob lists, traffic length, sweep).
DEFAULT_QUESTION = Path(__file__).resolve().parents[2] / "config" / "default.yaml"
DGDR_SET = ("model_name", "hardware_sku", "gpu_budget", "backend")  # search_space fields a DGDR decides
# The DGDR's GPU SKUs aiconfigurator has perf data for, by its system name; any other SKU is refused by name.
SKU_SYSTEMS = {
    "a100_sxm": "a100_sxm", "b200_sxm": "b200_sxm", "h100_sxm": "h100_sxm", "h200_sxm": "h200_sxm",
    "l40s": "l40s", "gb200_sxm": "gb200",
}  # fmt: skip
DYNAMO_DEFAULTS = {"isl": 4000, "osl": 1000, "ttft": 2000.0, "itl": 30.0}  # the wheel's WorkloadSpec and SLASpec
THOROUGH = {"max_rounds": 20, "candidates_per_round": 16}  # `thorough`: SweepConfig's own rounds, 16 per round
MAX_THROUGHPUT_KV_LOAD = 1.0  # no load given: each candidate at the concurrency its KV cache holds
VRAM_TOLERANCE = 0.10  # a vramMb this far from the system file's contradicts it
WEIGHT_SHARE = 0.9  # the engines' default memory fraction: weights beyond this share of the GPUs cannot load
SWEEP_ANNOTATION = "spica.dev/sweep"  # Spica's own sweep settings (JSON), a DGDR having no field for them
TOP_KEYS = ("apiVersion", "kind", "metadata", "spec")
METADATA_KEYS = ("name", "namespace", "labels", "annotations")
NOT_READ = {
    "image": "Spica runs no profiling Job (it replays)",
    "runtimeVersionOverride": "the images are those of the installed ai-dynamo release, the one replayed",
    "modelCache": "the deployment files load the model by its name; mount a PVC through overrides.dgd",
    "autoApply": "Spica applies nothing: deploy/dgdr.yaml says phase Ready with the selected deployment",
    "overrides.profilingJob": "Spica runs no profiling Job",
    "hardware.interconnect": "the system file's interconnect is what the replay times",
    "hardware.rdma": "the replay does not model the transport",
}


class DgdrSource(StrictModel):
    """The config's `dgdr` block: the request a config was mapped from. Spica writes it; a user does not."""

    request: dict[str, Any]  # the DynamoGraphDeploymentRequest as given (apiVersion, kind, metadata, spec)
    mapping: list[str]  # "DGDR field -> Spica setting: why", one line per defaulted or reinterpreted field
    origins: dict[str, str]  # Spica field path -> the DGDR field it came from (problems are named by the latter)

    @property
    def dgd_override(self) -> dict[str, Any] | None:
        return ((self.request.get("spec") or {}).get("overrides") or {}).get("dgd")


def dgdr_config(data: dict[str, Any], source: str | None = None) -> dict[str, Any]:
    """The SmartSearchConfig mapping of a DGDR document (with its `dgdr` block); ConfigError naming DGDR paths."""
    problems = request_problems(data)
    if problems:
        raise ConfigError(problems, source=source, subject=SUBJECT)
    typed = wheel_request({"spec": data["spec"]}).spec
    mapper = _Mapper(data, typed)
    config = mapper.config()
    if mapper.problems:
        raise ConfigError(mapper.problems, source=source, subject=SUBJECT)
    config["dgdr"] = {"request": data, "mapping": mapper.notes, "origins": mapper.origins}
    return config


def validated_dgdr(data: dict[str, Any], source: str, validate: Callable[[dict[str, Any]], T]) -> T:
    """`validate` (the config model's) of the DGDR's mapping, its problems named by the DGDR fields they came from."""
    mapped = dgdr_config(data, source)
    try:
        return validate(mapped)
    except ConfigError as error:
        raise relabel(error, mapped["dgdr"]["origins"]) from None


def refuse_written_dgdr(data: dict[str, Any], source: str) -> None:
    """A sweep config that gives the `dgdr` block itself: Spica writes it, from a DGDR."""
    if "dgdr" in data:
        message = "Spica writes it when it reads a DynamoGraphDeploymentRequest: hand Spica the DGDR itself"
        raise ConfigError([("dgdr", message)], source=source)


def request_problems(data: dict[str, Any], status: bool = False) -> list[tuple[str, str]]:
    """Spica's strict check of a DGDR document, then the wheel's types; (DGDR path, message) pairs."""
    found: list[tuple[str, str]] = []
    if data.get("apiVersion") != DGDR_API_VERSION:
        found.append(("apiVersion", f"{data.get('apiVersion')!r}; Spica reads {DGDR_API_VERSION!r}, the DGDR "
                      "version of the pinned ai-dynamo"))  # fmt: skip
    if data.get("kind") != DGDR_KIND:
        found.append(("kind", f"{data.get('kind')!r}; allowed: {DGDR_KIND!r}"))
    allowed = (*TOP_KEYS, "status") if status else TOP_KEYS
    for key in data:
        if key == "status" and not status:
            found.append(("status", "Spica writes the status (deploy/dgdr.yaml); leave it out of the request"))
        elif key not in allowed:
            found.append((key, f"unknown key; allowed keys here: {list(allowed)}"))
    metadata = data.get("metadata", {})
    if not isinstance(metadata, dict):
        found.append(("metadata", "a mapping (name, namespace, labels, annotations)"))
    else:
        found += [(f"metadata.{key}", f"unknown key; allowed keys here: {list(METADATA_KEYS)}")
                  for key in metadata if key not in METADATA_KEYS]  # fmt: skip
    spec = data.get("spec")
    if not isinstance(spec, dict):
        what = "missing" if spec is None else f"a {type(spec).__name__}"
        return [*found, ("spec", f"required: the request (model, hardware, workload, sla ...), a mapping; got {what}")]
    types = _types()
    found += _unknown_keys(spec, types.DynamoGraphDeploymentRequestSpec, "spec")
    features = spec.get("features") if isinstance(spec.get("features"), dict) else {}
    found += planner_key_problems(features.get("planner"), set(types.PlannerConfig.model_fields))
    if status and isinstance(data.get("status"), dict):
        found += _unknown_keys(data["status"], types.DynamoGraphDeploymentRequestStatus, "status")
    try:
        wheel_request({"spec": spec, **({"status": data.get("status")} if status else {})})
    except ValidationError as exc:
        found += problems_from(exc)
    return found


def wheel_request(document: dict[str, Any]) -> Any:
    """The document as the wheel's `DynamoGraphDeploymentRequest` (its spec and status only)."""
    return _types().DynamoGraphDeploymentRequest.model_validate(document)


def _types() -> Any:
    prepare_dynamo_import()
    from dynamo.profiler.utils import dgdr_v1beta1_types

    return dgdr_v1beta1_types


def _unknown_keys(data: Any, model: type[BaseModel], where: str) -> list[tuple[str, str]]:
    """Every key the wheel's model would drop silently, by its path (nested models walked; free maps not)."""
    if not isinstance(data, dict):
        return []  # the wheel's types say what the value should be
    fields = {name: field for name, field in model.model_fields.items()}
    fields.update({field.alias: field for field in model.model_fields.values() if field.alias})
    found = []
    for key, value in data.items():
        field = fields.get(key)
        if field is None:
            found.append((f"{where}.{key}", f"unknown key; allowed keys here: {list(model.model_fields)}"))
            continue
        inner = _model_in(field.annotation)
        if inner is not None and inner.__name__ != "PlannerConfig":  # the planner's keys: config/dgdr_features.py
            found += _unknown_keys(value, inner, f"{where}.{key}")
    return found


def _model_in(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    return next((m for m in map(_model_in, getattr(annotation, "__args__", ())) if m is not None), None)


def default_question() -> dict[str, Any]:
    """config/default.yaml, the question a DGDR's unsaid settings are taken from."""
    if not DEFAULT_QUESTION.is_file():
        raise ConfigError([("", f"a DGDR is mapped over Spica's default question, {DEFAULT_QUESTION}, not found")])
    return yaml.safe_load(DEFAULT_QUESTION.read_text(encoding="utf-8"))


class _Mapper:
    """One DGDR's mapping: the config, the notes ("DGDR field -> Spica setting"), the origins and the problems."""

    def __init__(self, data: dict[str, Any], spec: Any):
        self.raw, self.spec = data["spec"], spec
        self.metadata = data.get("metadata") or {}
        self.notes: list[str] = []
        self.origins: dict[str, str] = {}
        self.problems: list[tuple[str, str]] = []

    def note(self, field: str, setting: str, why: str = "") -> None:
        self.notes.append(f"{field} -> {setting}" + (f": {why}" if why else ""))

    def config(self) -> dict[str, Any]:
        base = default_question()
        space = {k: v for k, v in base["search_space"].items() if k not in DGDR_SET}
        self.note("(no DGDR field)", "search_space engine, router-weight and planner knob lists, "
                  f"workload.num_request_ratio {base['workload']['num_request_ratio']}",
                  "Spica's default question (config/default.yaml), a DGDR having no fields for them")  # fmt: skip
        space.update(self._hardware_and_model())
        workload = {**self._workload(), "num_request_ratio": base["workload"]["num_request_ratio"]}
        goal = self._goal()
        features = map_features(self.raw.get("features") or {}, self.spec.features, space, goal, self.raw)
        self.notes += features.notes
        self.origins.update(features.origins)
        self.problems += features.problems
        override = (self.raw.get("overrides") or {}).get("dgd")
        if override is not None:
            self.problems += override_problems(override, "spec.overrides.dgd")
        self._not_read()
        return {"search_space": features.search_space, "workload": workload, "goal": goal,
                "sweep": self._sweep(base["sweep"])}  # fmt: skip

    def _hardware_and_model(self) -> dict[str, Any]:
        hardware = self.spec.hardware or _types().HardwareSpec()
        space: dict[str, Any] = {"model_name": self.spec.model}
        self.origins["search_space.model_name"] = "spec.model"
        sku = hardware.gpuSku.value if hardware.gpuSku else None
        if sku is None:
            self.problems.append(("spec.hardware.gpuSku", f"required by Spica, which has no cluster to detect it "
                                  f"from; one of {list(SKU_SYSTEMS)}"))  # fmt: skip
            return space
        system = SKU_SYSTEMS.get(sku)
        if system is None:
            self.problems.append(("spec.hardware.gpuSku", f"{sku!r} has no aiconfigurator perf data, so Spica cannot "
                                  f"replay it; supported: {list(SKU_SYSTEMS)}"))  # fmt: skip
            return space
        space["hardware_sku"] = system
        self.origins["search_space.hardware_sku"] = "spec.hardware.gpuSku"
        if system != sku:
            self.note(f"spec.hardware.gpuSku {sku}", f"search_space.hardware_sku {system}", "aiconfigurator's name")
        backend = self.spec.backend.value
        versions = {name: resolve_backend_version(system, name) for name in BACKENDS}
        usable = [name for name in BACKENDS if versions[name]]
        self.origins["search_space.backend"] = "spec.backend"
        if backend == "auto":
            space["backend"] = usable
            self.note("spec.backend auto" + ("" if "backend" in self.raw else " (not given)"),
                      f"search_space.backend {usable}", f"every backend with perf data on {system}")  # fmt: skip
        elif versions.get(backend):
            space["backend"] = [backend]
        else:
            self.problems.append(("spec.backend", f"{backend!r} has no perf data on {system}; with: {usable}"))
        total = hardware.totalGpus
        if total is None or total < 1:
            self.problems.append(("spec.hardware.totalGpus", f"{total!r}: Spica needs the GPU budget, a whole number "
                                  ">= 1 (it has no cluster to count)"))  # fmt: skip
        else:
            space["gpu_budget"] = total
            self.origins["search_space.gpu_budget"] = "spec.hardware.totalGpus"
            self._check_model_fits(space, total, usable or list(BACKENDS), versions)
        if hardware.numGpusPerNode is not None:
            space["gpus_per_node"] = node = hardware.numGpusPerNode
            self.origins["search_space.gpus_per_node"] = "spec.hardware.numGpusPerNode"
            self.note(f"spec.hardware.numGpusPerNode {node}", f"search_space.gpus_per_node {node}", "the node the "
                      "deployment files split a worker over; below the system's, no worker spans nodes")  # fmt: skip
        if hardware.vramMb is not None:
            have = system_facts(system).vram_bytes / 2**20
            if abs(hardware.vramMb - have) > VRAM_TOLERANCE * have:
                message = (f"{hardware.vramMb:g} MiB contradicts {system}'s {have:.0f} MiB (aiconfigurator's system "
                           "file); give it, or leave it out")  # fmt: skip
                self.problems.append(("spec.hardware.vramMb", message))
            else:
                self.note(f"spec.hardware.vramMb {hardware.vramMb:g}", f"{system}'s {have:.0f} MiB", "the system file")
        return space

    def _check_model_fits(self, space: dict[str, Any], total: int, backends: list[str], versions: dict) -> None:
        """A budget whose GPUs cannot hold the weights: refused here, by the DGDR's field."""
        if model_source(space["model_name"]) is None:
            return  # the catalog check names spec.model (nothing is downloaded to learn its size)
        backend, system = backends[0], space["hardware_sku"]
        weights = model_facts(space["model_name"], system, backend, versions[backend]).weight_bytes
        vram = system_facts(system).vram_bytes
        needed = math.ceil(weights / (WEIGHT_SHARE * vram))
        if total < needed:
            self.problems.append(("spec.hardware.totalGpus", f"{total}: {space['model_name']}'s weights alone take "
                                  f"{weights / 2**30:.0f} GiB, and {total} x {system} hold {WEIGHT_SHARE:.0%} of "
                                  f"{total * vram / 2**30:.0f} GiB; give at least {needed}"))  # fmt: skip

    def _workload(self) -> dict[str, Any]:
        given = self.raw.get("workload") or {}
        typed = self.spec.workload
        out: dict[str, Any] = {}
        for name in ("isl", "osl"):
            value = getattr(typed, name) if typed is not None else DYNAMO_DEFAULTS[name]
            out[name] = int(value)
            self.origins[f"workload.{name}"] = f"spec.workload.{name}"
            if name not in given:
                self.note(f"spec.workload.{name} (not given)", f"workload.{name} {value}", "Dynamo's default")
        concurrency, rate = (typed.concurrency, typed.requestRate) if typed is not None else (None, None)
        if concurrency is not None and rate is not None:
            self.problems.append(("spec.workload", f"both concurrency ({concurrency:g}) and requestRate ({rate:g}): "
                                  "they are exclusive (a closed or an open loop); give one"))  # fmt: skip
        elif concurrency is not None:
            if not float(concurrency).is_integer() or concurrency < 1:
                self.problems.append(("spec.workload.concurrency", f"{concurrency:g}: requests in flight, a whole "
                                      "number >= 1"))  # fmt: skip
            out["concurrency"] = int(concurrency)
            self.origins["workload.concurrency"] = "spec.workload.concurrency"
        elif rate is not None:
            out["request_rate"] = float(rate)
            self.origins["workload.request_rate"] = "spec.workload.requestRate"
        else:
            out["kv_load_ratio"] = MAX_THROUGHPUT_KV_LOAD
            self.note("spec.workload concurrency and requestRate (neither given)",
                      f"workload.kv_load_ratio {MAX_THROUGHPUT_KV_LOAD:g}", "the profiler's maximum-throughput "
                      "case: each candidate is replayed as a closed loop as deep as its KV cache holds, so the goal "
                      "ranks what each deployment serves at its fullest")  # fmt: skip
        return out

    def _goal(self) -> dict[str, Any]:
        given = self.raw.get("sla") or {}
        typed = self.spec.sla
        latency = typed is not None and typed.optimizationType is not None and typed.optimizationType.value == "latency"
        self.origins["goal"] = "spec.sla"
        if typed is not None and typed.e2eLatency is not None:
            sla: dict[str, Any] = {"e2e_ms": float(typed.e2eLatency)}
            self.note(f"spec.sla.e2eLatency {typed.e2eLatency:g}", f"goal.sla.e2e_ms {typed.e2eLatency:g}",
                      "the end-to-end bound alone: the ttft and itl Dynamo fills in are ignored, as its profiler "
                      "ignores them")  # fmt: skip
        else:
            sla = {}
            for name, key in (("ttft", "ttft_ms"), ("itl", "itl_ms")):
                value = getattr(typed, name) if typed is not None else DYNAMO_DEFAULTS[name]
                sla[key] = float(value)
                if name not in given:
                    self.note(f"spec.sla.{name} (not given)", f"goal.sla.{key} {value:g}", "Dynamo's default")
        given_type = typed.optimizationType.value if typed is not None and typed.optimizationType else "(not given)"
        kind = f"optimizationType {given_type}"
        own = "Spica's own reading: Dynamo 1.5.1's profiler does not read optimizationType"
        if latency:
            sla["percentile"] = 50
            self.note(f"spec.sla.{kind}", "goal.target e2e_latency, goal.sla.percentile 50",
                      f"the lowest mean end-to-end latency whose median meets the SLA; {own}")  # fmt: skip
            return {"target": "e2e_latency", "sla": sla}
        self.note(f"spec.sla.{kind}", "goal.target goodput_per_gpu",
                  f"requests served within the SLA per second per GPU; {own}")  # fmt: skip
        return {"target": "goodput_per_gpu", "sla": sla}

    def _sweep(self, base: dict[str, Any]) -> dict[str, Any]:
        sweep = dict(base)
        strategy = self.spec.searchStrategy.value
        self.origins["sweep"] = "spec.searchStrategy"
        given = "" if "searchStrategy" in self.raw else " (not given)"
        if strategy == "thorough":
            sweep.update(THOROUGH)
            self.note(f"spec.searchStrategy thorough{given}", f"sweep.max_rounds {THOROUGH['max_rounds']}, "
                      f"candidates_per_round {THOROUGH['candidates_per_round']}", "a larger search; Spica replays in "
                      "both strategies (Dynamo's thorough benchmarks real GPUs)")  # fmt: skip
        else:
            self.note(f"spec.searchStrategy rapid{given}", f"sweep.max_rounds {sweep['max_rounds']}, "
                      f"candidates_per_round {sweep.get('candidates_per_round')}", "the default question's rounds; "
                      "Spica replays in both strategies (Dynamo's rapid estimates with aiconfigurator)")  # fmt: skip
        annotation = (self.metadata.get("annotations") or {}).get(SWEEP_ANNOTATION)
        if annotation is not None:
            where = f"metadata.annotations.{SWEEP_ANNOTATION}"
            try:
                extra = yaml.safe_load(annotation) if isinstance(annotation, str) else None
            except yaml.YAMLError:
                extra = None
            if not isinstance(extra, dict):
                self.problems.append((where, f"{annotation!r}: a JSON object of sweep settings, e.g. "
                                      "'{\"max_rounds\": 2, \"seed\": 1}'"))  # fmt: skip
                return sweep
            sweep.update(extra)
            self.origins["sweep"] = where
            self.note(where, f"sweep {extra}", "Spica's own sweep settings, which a DGDR has no field for")
        return sweep

    def _not_read(self) -> None:
        for dotted, why in NOT_READ.items():
            parent, _, key = dotted.rpartition(".")
            holder = (self.raw.get(parent) or {}) if parent else self.raw
            if isinstance(holder, dict) and key in holder and holder[key] is not None:
                self.note(f"spec.{dotted}", "not read", why)
        if self.metadata.get("namespace"):
            namespace = self.metadata["namespace"]
            self.note(f"metadata.namespace {namespace}", "not read", "the files are written for namespace 'default'; "
                      f"`spica report <run> --namespace {namespace}` writes them for yours")  # fmt: skip


def relabel(error: ConfigError, origins: dict[str, str]) -> ConfigError:
    """The error with each Spica path named by the DGDR field it was mapped from (the longest origin that holds it)."""
    problems = []
    for path, message in error.problems:
        holders = [spica for spica in origins if path == spica or path.startswith((f"{spica}.", f"{spica}["))]
        if holders:
            spica = max(holders, key=len)
            problems.append((f"{origins[spica]} (as {path})", message))
        else:
            problems.append((path, f"{message} (in the config Spica mapped the DGDR onto)"))
    return ConfigError(problems, source=error.source, subject=SUBJECT)
