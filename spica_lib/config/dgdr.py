"""A DynamoGraphDeploymentRequest read as Spica's question: strictly, then by Dynamo's own types, then mapped.

The request is read strictly and by the pinned wheel's types first (config/dgdr_request.py: an unknown key,
a refused value, a bad name or label, each by its path; a null is the field's default). Then it is mapped onto
a `SmartSearchConfig` (docs/dgdr.md): what a DGDR cannot say (the engine, router-weight and planner knob
lists, the traffic's length) comes from Spica's default question, config/default.yaml, and every defaulted or
reinterpreted field is written down, one line each ("DGDR field -> Spica setting"), in the config's `dgdr`
block, with the DGDR path each setting came from (`origins`), so that a problem the config's own checks find
later is still named by the DGDR's field (config/origins.py).

Every problem is said in one pass: the strict check's, the mapping's and the mapped config's, each once (a
problem inside a field already refused is not said again), before anything runs.

The features (router and planner) are mapped in config/dgdr_features.py, `overrides.dgd` checked in
config/dgd_override.py.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import yaml

from spica_lib.config.dgd_override import override_problems
from spica_lib.config.dgdr_features import map_features
from spica_lib.config.dgdr_request import ReadRequest, read_request, wheel_types, wheel_value
from spica_lib.config.fields import BACKENDS
from spica_lib.config.input_kind import DGDR_KIND
from spica_lib.config.origins import holds, origin_of, relabel
from spica_lib.config.strict import ConfigError, StrictModel
from spica_lib.facts.catalog import model_source, resolve_backend_version
from spica_lib.facts.hardware import model_facts, system_facts

SUBJECT = DGDR_KIND
UNMAPPED = " (in the config Spica mapped the DGDR onto)"  # a problem at a Spica path no DGDR field sets
T = TypeVar("T")
# Spica's default question: what a DGDR cannot say is asked as it asks it (knob lists, traffic length, sweep).
DEFAULT_QUESTION = Path(__file__).resolve().parents[2] / "config" / "default.yaml"
DGDR_SET = ("model_name", "hardware_sku", "gpu_budget", "backend")  # search_space fields a DGDR decides
# The DGDR's GPU SKUs aiconfigurator has perf data for, by its system name; any other SKU is refused by name.
SKU_SYSTEMS = {
    "a100_sxm": "a100_sxm", "b200_sxm": "b200_sxm", "h100_sxm": "h100_sxm", "h200_sxm": "h200_sxm",
    "l40s": "l40s", "gb200_sxm": "gb200",
}  # fmt: skip
THOROUGH = {"max_rounds": 20, "candidates_per_round": 16}  # `thorough`: SweepConfig's own rounds, 16 per round
MAX_THROUGHPUT_KV_LOAD = 1.0  # no load given: each candidate at the concurrency its KV cache holds
VRAM_TOLERANCE = 0.10  # a vramMb this far from the system file's contradicts it
WEIGHT_SHARE = 0.9  # the engines' default memory fraction: weights beyond this share of the GPUs cannot load
SWEEP_ANNOTATION = "spica.dev/sweep"  # Spica's own sweep settings (JSON), a DGDR having no field for them
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

    @property
    def name(self) -> str | None:
        """The request's `metadata.name`: the deployments written for it are named after it (deploy/top.py)."""
        return (self.request.get("metadata") or {}).get("name")

    @property
    def labels(self) -> dict[str, str]:
        """The request's `metadata.labels`, carried to every DynamoGraphDeployment written for it."""
        return dict((self.request.get("metadata") or {}).get("labels") or {})


def validated_dgdr(data: dict[str, Any], source: str, validate: Callable[[dict[str, Any]], T]) -> T:
    """`validate` (the config model's) of the DGDR's mapping; ConfigError with every problem of the request, the
    mapping and the mapped config at once, each named by the DGDR field it came from."""
    read = read_request(data)
    if read.spec is None:
        raise ConfigError(read.problems, source=source, subject=SUBJECT)
    mapper = _Mapper(data, read)
    config = mapper.config()
    problems = read.problems + [p for p in mapper.problems if not _said(p[0], read.said)]
    origins = mapper.origins
    config["dgdr"] = {"request": data, "mapping": mapper.notes, "origins": origins}
    try:
        validated = validate(config)
    except ConfigError as error:
        # Not said again: a problem at a setting the mapping refused, or inside a DGDR field already refused.
        later = [(path, message) for path, message in error.problems if not _said(path, mapper.refused)
                 and not _said(origin_of(path, origins) or "", read.said)]  # fmt: skip
        problems += relabel(ConfigError(later), origins, SUBJECT, UNMAPPED).problems
    else:
        if not problems:
            return validated
    raise ConfigError(problems, source=source, subject=SUBJECT)


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _said(path: str, paths: list[str] | set[str]) -> bool:
    return any(holds(outer, path) for outer in paths)


def refuse_written_dgdr(data: dict[str, Any], source: str) -> None:
    """A sweep config that gives the `dgdr` block itself: Spica writes it, from a DGDR."""
    if "dgdr" in data:
        message = "Spica writes it when it reads a DynamoGraphDeploymentRequest: hand Spica the DGDR itself"
        raise ConfigError([("dgdr", message)], source=source)


def default_question() -> dict[str, Any]:
    """config/default.yaml, the question a DGDR's unsaid settings are taken from."""
    if not DEFAULT_QUESTION.is_file():
        raise ConfigError([("", f"a DGDR is mapped over Spica's default question, {DEFAULT_QUESTION}, not found")])
    return yaml.safe_load(DEFAULT_QUESTION.read_text(encoding="utf-8"))


class _Mapper:
    """One DGDR's mapping: the config, the notes ("DGDR field -> Spica setting"), the origins and the problems.

    It reads the spec as `read_request` left it: without nulls (each the wheel's default) and without the fields
    the wheel refused, `self.spec` the wheel's typed view of it (defaults filled in, enums or strings alike)."""

    def __init__(self, data: dict[str, Any], read: ReadRequest):
        self.raw, self.spec = read.spec, read.typed
        self.written = data["spec"]  # as given, its nulls in it: to say "null" where a default stands in for one
        self.metadata = _mapping(data.get("metadata"))  # not a mapping: refused by read_request, read as empty
        self.notes: list[str] = []
        self.origins: dict[str, str] = {}
        self.problems: list[tuple[str, str]] = []
        self.refused: set[str] = set()  # Spica settings left unset because their DGDR field was refused

    def note(self, field: str, setting: str, why: str = "") -> None:
        self.notes.append(f"{field} -> {setting}" + (f": {why}" if why else ""))

    def _unsaid(self, section: str, name: str) -> str:
        """How a field the mapping defaulted was left: " (null)" when written as null, else " (not given)"."""
        holder = self.written.get(section)
        return " (null)" if isinstance(holder, dict) and name in holder else " (not given)"

    def refuse(self, field: str, message: str, *settings: str) -> None:
        """A problem at the DGDR's `field`; the Spica `settings` it sets are not checked again by the config."""
        self.problems.append((field, message))
        self.refused.update(settings)

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
        self._metadata()
        return {"search_space": features.search_space, "workload": workload, "goal": goal,
                "sweep": self._sweep(base["sweep"])}  # fmt: skip

    def _hardware_and_model(self) -> dict[str, Any]:
        """The model, GPU type, backends and budget; a refused one is left None, so the config cannot make one up."""
        hardware = self.spec.hardware or wheel_types().HardwareSpec()
        space: dict[str, Any] = {"model_name": self.spec.model}
        self.origins["search_space.model_name"] = "spec.model"
        self.origins.update({"search_space.hardware_sku": "spec.hardware.gpuSku",
                             "search_space.backend": "spec.backend",
                             "search_space.gpu_budget": "spec.hardware.totalGpus"})  # fmt: skip
        sku = wheel_value(hardware.gpuSku)
        system = SKU_SYSTEMS.get(sku)
        if sku is None:
            self.refuse("spec.hardware.gpuSku", f"required by Spica, which has no cluster to detect it from; one of "
                        f"{list(SKU_SYSTEMS)}", "search_space.hardware_sku")  # fmt: skip
        elif system is None:
            self.refuse("spec.hardware.gpuSku", f"{sku!r} has no aiconfigurator perf data, so Spica cannot replay it; "
                        f"supported: {list(SKU_SYSTEMS)}", "search_space.hardware_sku")  # fmt: skip
        total = hardware.totalGpus
        if total is None or total < 1:
            given = "not given" if total is None else f"{total!r}"
            self.refuse("spec.hardware.totalGpus", f"{given}: Spica needs the GPU budget, a whole number >= 1 (it has "
                        "no cluster to count)", "search_space.gpu_budget")  # fmt: skip
            space["gpu_budget"] = None
        if system is None:
            return space  # the backends, the node and the memory are facts of the GPU type's system
        space["hardware_sku"] = system
        if system != sku:
            self.note(f"spec.hardware.gpuSku {sku}", f"search_space.hardware_sku {system}", "aiconfigurator's name")
        backend = wheel_value(self.spec.backend)  # the wheel leaves its default a string, a given one an enum
        versions = {name: resolve_backend_version(system, name) for name in BACKENDS}
        usable = [name for name in BACKENDS if versions[name]]
        if backend == "auto":
            space["backend"] = usable
            self.note("spec.backend auto" + ("" if "backend" in self.raw else " (not given)"),
                      f"search_space.backend {usable}", f"every backend with perf data on {system}")  # fmt: skip
        elif versions.get(backend):
            space["backend"] = [backend]
        else:
            self.refuse("spec.backend", f"{backend!r} has no perf data on {system}; with: {usable}",
                        "search_space.backend")  # fmt: skip
            space["backend"] = None
        if "gpu_budget" not in space:
            space["gpu_budget"] = total
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
        typed = self.spec.workload or wheel_types().WorkloadSpec()  # not given: the wheel's own defaults
        out: dict[str, Any] = {}
        self.origins["workload"] = "spec.workload"
        for name in ("isl", "osl"):
            out[name] = value = getattr(typed, name)
            self.origins[f"workload.{name}"] = f"spec.workload.{name}"
            if name not in given:
                self.note(f"spec.workload.{name}{self._unsaid('workload', name)}", f"workload.{name} {value}",
                          "Dynamo's default")  # fmt: skip
        concurrency, rate = typed.concurrency, typed.requestRate
        if concurrency is not None and rate is not None:
            self.problems.append(("spec.workload", f"both concurrency ({concurrency:g}) and requestRate ({rate:g}): "
                                  "they are exclusive (a closed or an open loop); give one"))  # fmt: skip
            concurrency = None  # the rate stands in, so that the rest of the workload is still checked
        if concurrency is not None:
            out["concurrency"] = int(concurrency) if float(concurrency).is_integer() else concurrency
            self.origins["workload.concurrency"] = "spec.workload.concurrency"
            if not float(concurrency).is_integer() or concurrency < 1:
                self.refuse("spec.workload.concurrency", f"{concurrency:g}: requests in flight, a whole number >= 1",
                            "workload.concurrency")  # fmt: skip
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
        typed = self.spec.sla or wheel_types().SLASpec()  # not given: the wheel's own defaults
        optimization = wheel_value(typed.optimizationType)
        self.origins.update({"goal": "spec.sla", "goal.sla.ttft_ms": "spec.sla.ttft", "goal.sla.itl_ms": "spec.sla.itl",
                             "goal.sla.e2e_ms": "spec.sla.e2eLatency"})  # fmt: skip
        if typed.e2eLatency is not None:
            sla: dict[str, Any] = {"e2e_ms": float(typed.e2eLatency)}
            self.note(f"spec.sla.e2eLatency {typed.e2eLatency:g}", f"goal.sla.e2e_ms {typed.e2eLatency:g}",
                      "the end-to-end bound alone: the ttft and itl Dynamo fills in are ignored, as its profiler "
                      "ignores them")  # fmt: skip
        else:
            sla = {}
            for name, key in (("ttft", "ttft_ms"), ("itl", "itl_ms")):
                value = getattr(typed, name)
                sla[key] = float(value)
                if name not in given:
                    self.note(f"spec.sla.{name}{self._unsaid('sla', name)}", f"goal.sla.{key} {value:g}",
                              "Dynamo's default")  # fmt: skip
        kind = f"optimizationType {optimization or '(not given)'}"
        own = "Spica's own reading: Dynamo 1.5.1's profiler does not read optimizationType"
        if optimization == "latency":
            sla["percentile"] = 50
            self.note(f"spec.sla.{kind}", "goal.target e2e_latency, goal.sla.percentile 50",
                      f"the lowest mean end-to-end latency whose median meets the SLA; {own}")  # fmt: skip
            return {"target": "e2e_latency", "sla": sla}
        self.note(f"spec.sla.{kind}", "goal.target goodput_per_gpu",
                  f"requests served within the SLA per second per GPU; {own}")  # fmt: skip
        return {"target": "goodput_per_gpu", "sla": sla}

    def _sweep(self, base: dict[str, Any]) -> dict[str, Any]:
        sweep = dict(base)
        strategy = wheel_value(self.spec.searchStrategy)  # the wheel leaves its default a string, a given one an enum
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
        annotation = _mapping(self.metadata.get("annotations")).get(SWEEP_ANNOTATION)
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

    def _metadata(self) -> None:
        """What the request's metadata becomes: its name names the deployments, its labels go with them."""
        name, labels = self.metadata.get("name"), _mapping(self.metadata.get("labels"))
        if name:
            self.note(f"metadata.name {name}", f"the DynamoGraphDeployment of each rank, {name}-<rank> (its "
                      "components, Services and benchmark Jobs start with it)", "made unique per rank; shortened "
                      "with a hash where Kubernetes' name limits need it (deploy/k8s_names.py)")  # fmt: skip
        else:
            self.note("metadata.name (not given)", "the DynamoGraphDeployment of each rank, spica-<run>-<rank>")
        if labels:
            self.note(f"metadata.labels {sorted(map(str, labels))}",
                      "metadata.labels of every DynamoGraphDeployment written",
                      "merged under the labels of overrides.dgd")  # fmt: skip
        others = sorted(map(str, set(_mapping(self.metadata.get("annotations"))) - {SWEEP_ANNOTATION}))
        if others:
            self.note(f"metadata.annotations {others}", "not read", "they annotate the request, not the deployments")
        if self.metadata.get("namespace"):
            namespace = self.metadata["namespace"]
            self.note(f"metadata.namespace {namespace}", "not read", "the files are written for namespace 'default'; "
                      f"`spica report <run> --namespace {namespace}` writes them for yours")  # fmt: skip
