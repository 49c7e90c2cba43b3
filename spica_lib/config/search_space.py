"""`search_space`: what may vary between candidates, and what is pinned.

Four kinds of field: atomic list knobs (one entry pins, several are searched), pinned scalars,
composite knobs (preset ids or self-contained dicts, see `spica_lib.config.presets`) and
`parallel_configs` (empty means "enumerate every legal shape"). What a knob's values may be, and its
default list, is config/knob_values.py's; the rules between fields are here.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal

from pydantic import Field, StrictBool, StrictFloat, StrictInt, field_validator, model_validator

from spica_lib.config.fields import (
    ADMISSION_FIELDS,
    ENGINE_KNOBS,
    ENGINE_PINS,
    OFFLOAD_FIELDS,
    OFFLOAD_WEIGHTS,
    PARALLEL_KEYS,
    ROLES,
    ROUTER_WEIGHTS,
)
from spica_lib.config.knob_values import (
    KNOB_DEFAULTS,
    check_atomic_knob,
    check_composite_knob,
    composite_knob_field,
    engine_refusal,
    list_knob_field,
)
from spica_lib.config.presets import COMPOSITE_KNOBS, CompositeEntry, scaling_policy
from spica_lib.config.strict import StrictModel, several_problems

Number = StrictInt | StrictFloat


class SearchSpace(StrictModel):
    """Every knob of a deployment, searched or pinned. Unknown keys are rejected."""

    # deployment
    deployment_mode: list[Any] = list_knob_field("deployment_mode")
    backend: list[Any] = Field(default_factory=lambda: ["vllm"])
    parallel_configs: list[dict[str, Any]] = Field(default_factory=list)
    model_name: str = Field(min_length=1)
    hardware_sku: str = Field(min_length=1)
    gpu_budget: StrictInt = Field(default=32, ge=1)
    # An inventory of several GPU types (SKU -> GPUs available). hardware_sku + gpu_budget is its one-SKU
    # shorthand; with an inventory they are derived (its first SKU, its total) and may be left out.
    hardware: dict[str, StrictInt] | None = None
    min_gpu_budget: StrictInt | None = None
    # GPUs per node (None: the system file's, for the search and the deployment files alike: `node_gpus`). Not above
    # the system's; below it, a worker stays within one node (the perf DB times its collectives inside one), and the
    # files split by it.
    gpus_per_node: StrictInt | None = Field(default=None, ge=1)
    min_endpoint: StrictInt | None = Field(default=None, ge=1)
    context_length: StrictInt | None = Field(default=None, ge=1)
    startup_time: Number | None = Field(default=None, ge=0)
    aic_nextn: StrictInt | None = Field(default=None, ge=0, le=5)
    # The attention kernels' precision the perf DB is read at (None: the checkpoint's). SGLang runs MLA
    # attention in bf16 over an fp8 KV cache, and its perf DB holds only such context-MLA rows.
    aic_fmha_dtype: Literal["bfloat16", "fp8"] | None = None

    # engines, per role
    prefill_max_num_batched_tokens: list[Any] = list_knob_field("prefill_max_num_batched_tokens")
    prefill_max_num_seqs: list[Any] = list_knob_field("prefill_max_num_seqs")
    prefill_block_size: StrictInt = Field(default=64, ge=1)
    prefill_gpu_memory_utilization: Number = Field(default=0.9, gt=0, le=1)
    prefill_enable_prefix_caching: StrictBool = True
    decode_max_num_batched_tokens: list[Any] = list_knob_field("decode_max_num_batched_tokens")
    decode_max_num_seqs: list[Any] = list_knob_field("decode_max_num_seqs")
    decode_block_size: StrictInt = Field(default=64, ge=1)
    decode_gpu_memory_utilization: Number = Field(default=0.9, gt=0, le=1)
    decode_enable_prefix_caching: StrictBool = False
    agg_max_num_batched_tokens: list[Any] = list_knob_field("agg_max_num_batched_tokens")
    agg_max_num_seqs: list[Any] = list_knob_field("agg_max_num_seqs")
    agg_block_size: StrictInt = Field(default=64, ge=1)
    agg_gpu_memory_utilization: Number = Field(default=0.9, gt=0, le=1)
    agg_enable_prefix_caching: StrictBool = True

    # KV offload to host memory (G2): part of the reference schema, refused while the replay cannot simulate it
    num_g2_blocks: StrictInt = Field(default=0, ge=0)
    kv_bytes_per_token: StrictInt | None = Field(default=None, gt=0)
    bandwidth_g1_to_g2_gbps: Number | None = Field(default=None, gt=0)
    bandwidth_g2_to_g1_gbps: Number | None = Field(default=None, gt=0)
    offload_batch_size: StrictInt | None = Field(default=None, ge=1)

    # router
    router_mode: list[Any] = list_knob_field("router_mode")
    overlap_score_credit: list[Any] = list_knob_field("overlap_score_credit")
    prefill_load_scale: list[Any] = list_knob_field("prefill_load_scale")
    host_cache_hit_weight: list[Any] = list_knob_field("host_cache_hit_weight")
    disk_cache_hit_weight: list[Any] = list_knob_field("disk_cache_hit_weight")
    router_temperature: list[Any] = list_knob_field("router_temperature")
    active_decode_blocks_threshold: StrictInt | None = None
    active_prefill_tokens_threshold: StrictInt | None = None
    active_prefill_tokens_threshold_frac: Number | None = None
    no_admission_control: StrictBool = False

    # planner composites and the load-predictor grid
    planner_scaling_policy: list[str | dict[str, Any]] = composite_knob_field("planner_scaling_policy")
    planner_fpm_sampling: list[str | dict[str, Any]] = composite_knob_field("planner_fpm_sampling")
    planner_load_sensitivity: list[str | dict[str, Any]] = composite_knob_field("planner_load_sensitivity")
    load_predictor_candidates: list[str | dict[str, Any]] = composite_knob_field("load_predictor_candidates")

    @model_validator(mode="before")
    @classmethod
    def _inventory_or_shorthand(cls, data: Any) -> Any:
        if not isinstance(data, dict) or not isinstance(data.get("hardware"), dict) or not data["hardware"]:
            return data
        counts = list(data["hardware"].values())
        if not all(isinstance(n, int) and not isinstance(n, bool) and n >= 1 for n in counts):
            return data  # the field's own check names the bad count
        derived = {"hardware_sku": next(iter(data["hardware"])), "gpu_budget": sum(counts)}
        given = {name: data[name] for name in derived if name in data}
        if any(derived[name] != value for name, value in given.items()):
            raise ValueError(
                f"hardware {data['hardware']} is the GPU inventory and hardware_sku + gpu_budget its one-SKU "
                f"shorthand: give one or the other (got {given}; the inventory means {derived})"
            )
        data = {**data, **derived}
        if len(counts) == 1:  # one GPU type: exactly the shorthand, with the shorthand's run id
            data["hardware"] = None
        return data

    @field_validator("hardware", mode="after")
    @classmethod
    def _inventory_counts(cls, hardware: dict[str, int] | None) -> dict[str, int] | None:
        if hardware is None:
            return None
        bad = {sku: count for sku, count in hardware.items() if not sku or count < 1}
        if bad or not hardware:
            raise ValueError(f"an inventory maps each GPU type to the GPUs available (at least 1), got {hardware}")
        return hardware

    def node_gpus(self, sku: str | None = None) -> int:
        """GPUs per node on `sku` (default: hardware_sku): gpus_per_node, else the system file's. The one place this
        default is applied: the search, the Kubernetes files and the SLURM script all read it here."""
        from spica_lib.facts.hardware import system_facts

        return self.gpus_per_node or system_facts(sku or self.hardware_sku).gpus_per_node

    def context_limit(self, model_max_context: int) -> int:
        """The longest sequence a worker is sized for: context_length, else the model's own maximum."""
        return self.context_length or model_max_context

    def inventory(self) -> dict[str, int]:
        """GPUs available per GPU type: the inventory, or {hardware_sku: gpu_budget}."""
        return dict(self.hardware) if self.hardware else {self.hardware_sku: self.gpu_budget}

    def largest_sku_space(self) -> SearchSpace:
        """This space on one GPU type: itself, or an inventory's type with the most GPUs (the first of a tie),
        with all of them as the budget. aiconfigurator's own pick takes one system; this is the one it gets."""
        if not self.hardware:
            return self
        sku = max(self.hardware, key=lambda name: self.hardware[name])
        return self.model_copy(update={"hardware": None, "hardware_sku": sku, "gpu_budget": self.hardware[sku]})

    def hardware_text(self) -> str:
        """The GPUs searched, in words: `h200_sxm, at most 8 GPUs` or `4 x h200_sxm + 16 x h100_sxm`."""
        if self.hardware:
            return " + ".join(f"{count} x {sku}" for sku, count in self.hardware.items())
        return f"{self.hardware_sku}, at most {self.gpu_budget} GPUs"

    @property
    def has_gpu_inventory(self) -> bool:
        """Whether the GPUs searched are an inventory of several GPU types (`hardware`), not one `hardware_sku`
        with a `gpu_budget`: then every layout names its roles' SKUs."""
        return self.hardware is not None

    @field_validator(*KNOB_DEFAULTS, mode="after")
    @classmethod
    def _atomic_in_choices(cls, values: list[Any], info: Any) -> list[Any]:
        return check_atomic_knob(info.field_name, values)

    @field_validator("prefill_block_size", "decode_block_size", "agg_block_size", mode="after")
    @classmethod
    def _block_size_every_backend_takes(cls, size: int, info: Any) -> int:
        # Each backend's scheduler has its own rule (vLLM and TRT-LLM need at least 2 tokens per block).
        for backend in dict.fromkeys(info.data.get("backend") or []):
            refused = engine_refusal({"engine_type": backend, "block_size": size})
            if refused:
                raise ValueError(f"{size} is refused by Dynamo's {backend} engine: {refused}")
        return size

    @field_validator(*COMPOSITE_KNOBS, mode="after")
    @classmethod
    def _composite_entries(cls, entries: list[CompositeEntry], info: Any) -> list[CompositeEntry]:
        return check_composite_knob(info.field_name, entries)

    @field_validator("parallel_configs", mode="after")
    @classmethod
    def _parallel_entries(cls, entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
        for index, entry in enumerate(entries):
            if "prefill" in entry or "decode" in entry:
                extra = sorted(set(entry) - set(ROLES["disagg"]))
                if extra or "prefill" not in entry or "decode" not in entry:
                    raise ValueError(
                        f"entry {index}: a disagg entry has exactly the keys 'prefill' and 'decode', got {sorted(entry)}"
                    )
                for role in ROLES["disagg"]:
                    _check_shape(f"entry {index}.{role}", entry[role])
            else:
                _check_shape(f"entry {index}", entry)
        return entries

    @model_validator(mode="after")
    def _cross_field_rules(self) -> SearchSpace:
        # Each rule is checked whatever the others found, so that every problem is said in one pass.
        found = []
        rules = (self._check_budget_floor, self._check_offload_unused, self._check_admission_pins,
                 self._check_min_endpoint, self._check_planner_knobs_used, self._check_role_knobs_used,
                 self._check_kv_router_weights_used, self._check_parallel_pins_mode, self._check_inventory_pins)
        for rule in rules:
            try:
                rule()
            except ValueError as problem:
                found.append(("", str(problem), None))
        if found:
            raise several_problems(type(self).__name__, found)
        return self

    def _check_budget_floor(self) -> None:
        if self.min_gpu_budget is not None and not 0 < self.min_gpu_budget <= self.gpu_budget:
            raise ValueError(
                f"min_gpu_budget must satisfy 0 < min_gpu_budget <= gpu_budget "
                f"(got min_gpu_budget={self.min_gpu_budget}, gpu_budget={self.gpu_budget})"
            )

    def _check_inventory_pins(self) -> None:
        if self.has_gpu_inventory and self.gpus_per_node is not None:
            raise ValueError(
                f"gpus_per_node {self.gpus_per_node} is one system's node size, and hardware {self.hardware} lists "
                "several GPU types: remove it (each type's node is its system file's)"
            )
        if self.has_gpu_inventory and self.parallel_configs:
            raise ValueError(
                f"parallel_configs pins layouts without a GPU type, and hardware {self.hardware} lists several: "
                "pin them on a one-SKU space (hardware_sku + gpu_budget), or remove them"
            )

    def _check_offload_unused(self) -> None:
        # ai-dynamo 1.5.1's mocker has no host-memory tier: these settings would change nothing replayed.
        given = [name for name in OFFLOAD_FIELDS if getattr(self, name) not in (None, 0)]
        # The weights' defaults are inert (never searched); any other list asks for something the replay lacks.
        given += [name for name in OFFLOAD_WEIGHTS if getattr(self, name) != list(KNOB_DEFAULTS[name])]
        if given:
            raise ValueError(
                f"{given}: the pinned Dynamo replay does not simulate host-memory (G2) KV offload, so these "
                "settings would have no effect on any score; remove them (num_g2_blocks may only be 0)"
            )

    def _check_admission_pins(self) -> None:
        used = [name for name in ADMISSION_FIELDS if getattr(self, name) not in (None, False)]
        if not used:
            return
        if "kv_router" not in self.router_mode:
            raise ValueError(
                f"router admission-control knobs {used} belong to the KV router, and router_mode "
                f"{self.router_mode} has none (round robin admits every request): they would change nothing; remove them"
            )
        raise ValueError(
            f"router admission-control knobs {used} are not supported by the Dynamo replay API "
            "with router_mode kv_router; remove them so the replay matches the deployment files"
        )

    def _check_min_endpoint(self) -> None:
        if self.min_endpoint is None:
            return
        if not any(scaling_policy(entry).scales for entry in self.planner_scaling_policy):
            raise ValueError(
                f"min_endpoint {self.min_endpoint} is the fewest workers an autoscaling planner may scale down to; "
                f"planner_scaling_policy {self.planner_scaling_policy} never scales, so it would change nothing: "
                "remove it, or list a scaling policy"
            )

    def _changed(self, names: Iterable[str]) -> list[str]:
        """Those of `names` set to other than their default (compared with the default, so a dump reads back)."""
        fields = type(self).model_fields
        return [name for name in names if getattr(self, name) != fields[name].get_default(call_default_factory=True)]

    def _check_planner_knobs_used(self) -> None:
        """A planner knob set by hand needs a listed policy that scales the way the knob steers."""
        policies = [scaling_policy(entry) for entry in self.planner_scaling_policy]
        needs = {
            "planner_fpm_sampling": ("scales", any(p.scales for p in policies)),
            "planner_load_sensitivity": ("scales on load", any(p.enable_load_scaling for p in policies)),
            "load_predictor_candidates": ("scales on throughput", any(p.enable_throughput_scaling for p in policies)),
            "startup_time": ("scales (it is a new worker's start-up)", any(p.scales for p in policies)),
        }
        for name in self._changed(needs):
            what, met = needs[name]
            if not met:
                raise ValueError(
                    f"{name} steers an autoscaling planner that {what}, and no planner_scaling_policy in "
                    f"{self.planner_scaling_policy} does, so it would change nothing: remove it, or list such a policy"
                )

    def _check_role_knobs_used(self) -> None:
        """Engine settings of a role need a listed mode that has that role."""
        for mode, roles in (("disagg", ("prefill", "decode")), ("agg", ("agg",))):
            if mode in self.deployment_mode:
                continue
            stray = self._changed(f"{role}_{knob}" for role in roles for knob in (*ENGINE_KNOBS, *ENGINE_PINS))
            if stray:
                raise ValueError(
                    f"{stray} set the engines of {mode} deployments, and deployment_mode {self.deployment_mode} "
                    f"has none, so they would change nothing: remove them, or add {mode!r}"
                )

    def _check_kv_router_weights_used(self) -> None:
        stray = self._changed(name for name in ROUTER_WEIGHTS if name not in OFFLOAD_WEIGHTS)
        if stray and "kv_router" not in self.router_mode:
            raise ValueError(
                f"{stray} weigh the KV router's choice of worker, and router_mode {self.router_mode} has no "
                "kv_router (round robin weighs nothing), so they would change nothing: remove them, or add kv_router"
            )

    def _check_parallel_pins_mode(self) -> None:
        if not self.parallel_configs:
            return
        if len(self.deployment_mode) != 1:
            raise ValueError(
                f"parallel_configs pins shapes for one deployment mode, so deployment_mode must list exactly "
                f"one mode (got {self.deployment_mode})"
            )
        is_disagg = [("prefill" in entry) for entry in self.parallel_configs]
        expected = self.deployment_mode[0] == "disagg"
        for index, disagg in enumerate(is_disagg):
            if disagg != expected:
                kind = "disagg ({prefill:, decode:})" if expected else "agg (a flat shape with tp)"
                raise ValueError(
                    f"parallel_configs entry {index} does not match deployment_mode {self.deployment_mode}; "
                    f"each entry must be an {kind} shape"
                )


def _check_shape(where: str, shape: Any) -> None:
    if not isinstance(shape, dict):
        raise ValueError(f"{where}: a parallel shape is a dict like {{tp: 2, replicas: 2}}, got {shape!r}")
    if "tp" not in shape:
        raise ValueError(f"{where}: a parallel shape needs 'tp', got {shape}")
    unknown = sorted(set(shape) - set(PARALLEL_KEYS))
    if unknown:
        raise ValueError(f"{where}: unknown keys {unknown}; allowed: {list(PARALLEL_KEYS)}")
    for key, value in shape.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{where}: {key} must be a positive integer, got {value!r}")
