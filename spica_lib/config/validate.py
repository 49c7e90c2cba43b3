"""Stage `validate`: a YAML config becomes `config.json` — normalised, hashed, with its provenance.

`check_config` is the whole gate a config passes before any compute: the schema and cross-field
rules, the aiconfigurator catalog (SKU, backends, model) and the scaling-policy filters. The
config hash ignores where the trace lives and covers what it holds, so moving a checkout keeps
the run id and editing the trace starts a new run.
"""

from __future__ import annotations

import re
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from spica_lib.base.artifacts import sha256_of
from spica_lib.base.versions import package_versions
from spica_lib.config import ConfigError, SearchSpace, SmartSearchConfig
from spica_lib.config.dgdr import SUBJECT as DGDR_SUBJECT
from spica_lib.config.dgdr import UNMAPPED
from spica_lib.config.origins import relabel
from spica_lib.config.policies import apply_policy_filters
from spica_lib.traces.scan import scan_trace
from spica_lib.facts.catalog import CatalogFacts, check_catalog, check_inventory
from spica_lib.facts.hardware import system_facts

# 2: trial files under the replay job that wrote them (rounds/<b>/<k>/trials/<job>/), found by the
# round and job recorded in each observation; a run folder of version 1 cannot be resumed.
SCHEMA_VERSION = 3  # 3: trial keys name the replayed deployment (older runs cannot be resumed)
RUN_ID_LENGTH = 12
RUN_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


class RunInputs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    config_file: str
    trace_file: str | None
    trace_sha256: str | None
    # With several workloads: every workload's trace (name -> path, name -> SHA-256); the fields above are the first's.
    workload_traces: dict[str, str] = Field(default_factory=dict)
    workload_trace_sha256: dict[str, str] = Field(default_factory=dict)


class ValidatedConfig(BaseModel):
    """Artifact `config.json`: the normalised config every later stage reads, and its provenance."""

    model_config = ConfigDict(extra="forbid")

    schema_version: int = SCHEMA_VERSION
    run: str
    config_sha256: str
    inputs: RunInputs
    catalog: CatalogFacts
    versions: dict[str, str]
    config: SmartSearchConfig

    def trace_paths(self) -> list[str]:
        """The traces the run's workloads replay (each once)."""
        workloads = [self.config.workload, *(self.config.workloads or [])]
        return list(dict.fromkeys(w.trace_path for w in workloads if w.trace_path))


def check_config(path: str | Path, check_hardware: bool = True) -> tuple[SmartSearchConfig, CatalogFacts | None]:
    """Every check a config must pass before compute. Raises ConfigError listing all problems found."""
    config = SmartSearchConfig.from_yaml(path)
    try:
        return check_parsed_config(config, str(path), check_hardware)
    except ConfigError as error:  # named by the fields the user wrote, where Spica read them under its own names
        if config.dgdr is not None:
            raise relabel(error, config.dgdr.origins, DGDR_SUBJECT, UNMAPPED) from None
        if config.adapters_alias is not None:
            raise relabel(error, config.adapters_alias.origins, error.subject) from None
        raise


def check_parsed_config(
    config: SmartSearchConfig, source: str, check_hardware: bool = True
) -> tuple[SmartSearchConfig, CatalogFacts | None]:
    """`check_config` on a config already read and schema-checked (a fleet's models are read from one file)."""
    problems: list[tuple[str, str]] = []
    facts = None
    if check_hardware:
        space = config.search_space
        facts, problems = check_catalog(space.hardware_sku, space.model_name, space.backend)
        if space.has_gpu_inventory:  # the inventory's own check names its SKUs (the first stands in for hardware_sku)
            problems = [p for p in problems if p[0] == "search_space.model_name"]
            problems += check_inventory(space.inventory(), space.backend)
        problems += _node_problems(space) if facts is not None else []
    try:
        apply_policy_filters(config)
    except ConfigError as exc:
        problems += exc.problems
    if problems:
        raise ConfigError(problems, source=source)
    return config, facts


def _node_problems(space: SearchSpace) -> list[tuple[str, str]]:
    """A node size the system's nodes cannot have (larger than aiconfigurator's system file says)."""
    system = system_facts(space.hardware_sku).gpus_per_node
    if space.gpus_per_node is None or space.gpus_per_node <= system:
        return []
    message = (f"{space.gpus_per_node} GPUs per node contradicts {space.hardware_sku}, whose nodes hold {system} "
               f"(aiconfigurator's system file): give at most {system}, or leave it out")  # fmt: skip
    return [("search_space.gpus_per_node", message)]


def config_sha256(config: SmartSearchConfig) -> str:
    """Hash of the normalised config, with the trace identified by its content, not its path."""
    data = config.model_dump(mode="json")
    trace = config.workload.trace_path
    if trace is not None:
        data["workload"]["trace_path"] = f"sha256:{scan_trace(trace).sha256}"
    for item in data.get("workloads") or []:
        if item.get("trace_path") is not None:
            item["trace_path"] = f"sha256:{scan_trace(item['trace_path']).sha256}"
    for workload in [data["workload"], *(data.get("workloads") or [])]:
        if isinstance(workload.get("holdout"), str):  # a held-out trace file, named by its content
            workload["holdout"] = f"sha256:{scan_trace(workload['holdout']).sha256}"
        elif workload.get("holdout") is None:
            workload.pop("holdout", None)  # a config without one keeps the run id it had before holdouts
    if data["search_space"].get("hardware") is None:
        data["search_space"].pop("hardware", None)  # one GPU type: the shorthand's run id of before inventories
    if data["goal"].get("sla_coverage") is None:
        data["goal"].pop("sla_coverage", None)  # no coverage floor: the run id of before the floor existed
    if data["sweep"].get("capacity_top") == 0:
        data["sweep"].pop("capacity_top")  # no capacity bisection: the run id of before it existed
    if data["sweep"].get("rounds_in_flight") == 1:
        data["sweep"].pop("rounds_in_flight")  # the barrier rounds of before: their runs keep their ids
    if data["search_space"].get("gpus_per_node") is None:
        data["search_space"].pop("gpus_per_node", None)  # the system's node: the run id of before the setting
    if data.get("dgdr") is None:
        data.pop("dgdr", None)  # not mapped from a DGDR: the run id of before DGDRs
    else:  # the request is hashed; how it was read (notes, path table) says where the settings came from
        data["dgdr"].pop("mapping")
        data["dgdr"].pop("origins")
    data.pop("adapters_alias", None)  # says where settings came from; they are hashed where they were set
    if data["search_space"].get("aic_fmha_dtype") is None:
        data["search_space"].pop("aic_fmha_dtype", None)  # the checkpoint's attention precision: the run id of before
    data["sweep"].pop("stress_band_source", None)  # says where the band came from; the band itself is hashed
    if data["sweep"].get("stress_band_roles") is None:
        data["sweep"].pop("stress_band_roles", None)  # no per-role bands: the run id of before them
    if data.get("calibration") is not None:
        data["calibration"].pop("file")  # its scales and source say what it is, wherever the file lies
    return sha256_of(data)


def check_run_name(run: str) -> str:
    if not RUN_NAME.match(run):
        raise ConfigError(
            [("run", f"{run!r} is not a usable run name; use letters, digits, '.', '_' or '-' (at most 64)")]
        )
    return run


def build_validated_config(path: str | Path, run: str | None = None) -> ValidatedConfig:
    config, facts = check_config(path)
    digest = config_sha256(config)
    trace = config.workload.trace_path
    return ValidatedConfig(
        run=check_run_name(run) if run else digest[:RUN_ID_LENGTH],
        config_sha256=digest,
        inputs=RunInputs(
            config_file=str(Path(path).resolve()),
            trace_file=trace,
            trace_sha256=scan_trace(trace).sha256 if trace else None,
            workload_traces={w.name: w.trace_path for w in config.workloads or [] if w.trace_path},
            workload_trace_sha256={
                w.name: scan_trace(w.trace_path).sha256 for w in config.workloads or [] if w.trace_path
            },
        ),
        catalog=facts,
        versions=package_versions(),
        config=config,
    )
