"""`SmartSearchConfig`: the one YAML a user writes — search space, workload, goal and sweep."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import Field, ValidationError, ValidationInfo, model_validator

from spica_lib.config.adapters import AdaptersAlias, read_adapters, refuse_written_alias
from spica_lib.config.calibration import Calibration, prior_calibration, resolve_calibration, sla_safety_problem
from spica_lib.config.dgdr import DgdrSource, refuse_written_dgdr, validated_dgdr
from spica_lib.config.finish_settings import resolve_finish
from spica_lib.config.goal import (
    TAIL_REQUESTS,
    OptimizationGoal,
    OptimizationTarget,
    requests_for_percentile,
)
from spica_lib.config.input_kind import InputKind, read_input, wrong_kind_error
from spica_lib.config.search_space import SearchSpace
from spica_lib.config.strict import ConfigError, StrictModel, problems_from
from spica_lib.config.sweep import (
    DEFAULT_ALGORITHM,
    DEFAULT_PARETO_ALGORITHM,
    MULTI_OBJECTIVE_ALGORITHMS,
    SweepConfig,
    default_max_eval_seconds,
)
from spica_lib.traces.scan import scan_trace
from spica_lib.traces.sample import sample_size
from spica_lib.config.workload import LOAD_DRIVERS, NamedWorkload, Workload

DEFAULT_PARETO_KV_LOAD_RATIO = [0.0, 1.0]
# `sweep.search_sample` left out: `auto`, since bench/search_sample.py showed that where its rule samples (a day
# trace) the search kept the whole-trace search's recommendation in 10 of 10 seeds (docs/benchmarks/search-sample.md).
DEFAULT_SEARCH_SAMPLE = "auto"
DEFAULT_STRESS_TOP = 3
DEFAULT_CAPACITY_TOP = 3  # the recommendation and the next two, with an SLA coverage floor
DEFAULT_STRESS_BAND = 0.15  # the error band of the replay's step times where no measured group says otherwise


class SmartSearchConfig(StrictModel):
    """A whole search request. Validation checks the schema and every cross-field rule."""

    search_space: SearchSpace
    workload: Workload  # with several workloads: the first (it sizes the load predictor and the deployment files)
    goal: OptimizationGoal = Field(default_factory=OptimizationGoal)
    sweep: SweepConfig = Field(default_factory=SweepConfig)
    # Several workloads one deployment must serve: `workload` written as a list of named workloads.
    workloads: list[NamedWorkload] | None = None
    # Opt-in step-time scales from `spica fidelity --fit` (config/calibration.py); off when left out.
    calibration: Calibration | None = None
    # Written by Spica when the config was mapped from a DynamoGraphDeploymentRequest (config/dgdr.py).
    dgdr: DgdrSource | None = None
    # Written by Spica when the config gave upstream Spica's `adapters:` section (config/adapters.py).
    adapters_alias: AdaptersAlias | None = None

    @model_validator(mode="before")
    @classmethod
    def _workload_list(cls, data: Any) -> Any:
        if not isinstance(data, dict) or not isinstance(data.get("workload"), list):
            return data
        if "workloads" in data:
            raise ValueError("workload is a list: give the workloads there only, not also under workloads")
        items = data["workload"]
        if not items:
            raise ValueError("workload is an empty list: give one workload, or a list of named workloads")
        first = items[0] if isinstance(items[0], dict) else {}
        primary = {k: v for k, v in first.items() if k not in ("name", "weight")}
        return {**data, "workload": primary, "workloads": items}

    @model_validator(mode="before")
    @classmethod
    def _pareto_sweeps_kv_load_by_default(cls, data: Any) -> Any:
        # A Pareto goal over a synthetic workload with no load driver sweeps the whole KV-load range.
        if not isinstance(data, dict) or not _is_pareto(data.get("goal")):
            return data
        workload = data.get("workload")
        if not isinstance(workload, dict) or workload.get("trace_path") is not None:
            return data
        if any(workload.get(name) is not None for name in LOAD_DRIVERS):
            return data
        return {**data, "workload": {**workload, "kv_load_ratio": list(DEFAULT_PARETO_KV_LOAD_RATIO)}}

    @model_validator(mode="after")
    def _goal_fits_workload_and_sweep(self, info: ValidationInfo) -> SmartSearchConfig:
        if self.workload.kv_load_ratio_range is not None and not self.goal.is_pareto:
            raise ValueError(
                f"workload.kv_load_ratio is a range {self.workload.kv_load_ratio}, which only a 'pareto' goal "
                f"can sweep (goal.target is {self.goal.target.value!r}); give one number instead"
            )
        self._check_workload_list()
        if "max_eval_seconds" not in self.sweep.model_fields_set:
            self.sweep.max_eval_seconds = default_max_eval_seconds(self._most_expected_requests())
        # Compared with the defaults, not with what was written, so that a dumped config reads back.
        defaults = SweepConfig.model_fields
        screening = self.sweep.screen_fraction != defaults["screen_fraction"].default
        if screening and self.sweep.screen_fraction is not None and self.goal.sla is None:
            raise ValueError(
                f"sweep.screen_fraction {self.sweep.screen_fraction} sets the prefix of the early stops against "
                "goal.sla; without an SLA there is nothing to stop against: set goal.sla, or remove it"
            )
        if self.calibration is None and not self.search_space.has_gpu_inventory:
            # No correction named: the shipped prior where it helps (several GPU types: none, as for a user's file).
            # Set in the instance's dict: assigning the field would validate this whole model again, and recurse.
            self.__dict__["calibration"] = prior_calibration(self.search_space.hardware_sku, list(self.search_space.backend))
        if self.calibration is not None:
            space = self.search_space
            base_dir = (info.context or {}).get("base_dir", ".")
            resolved = resolve_calibration(
                self.calibration, space.hardware_sku, space.model_name, list(space.backend), base_dir
            )
            # Filled in place: assigning the field would validate this whole model again, and recurse.
            self.calibration.file, self.calibration.source = resolved.file, resolved.source
            self.calibration.scales = resolved.scales
        problem = sla_safety_problem(self.goal.sla_safety, self.goal.sla is not None, self.calibration)
        if problem:
            raise ValueError(problem)
        self._resolve_search_sample()
        resolve_finish(self)
        self._resolve_stress()  # after the calibration: its measured held-out error may set the band
        self._resolve_capacity()
        self._resolve_warm_start()
        self._resolve_baselines()
        self._check_prices_and_fleet()
        if self.sweep.algorithm is None:
            default = DEFAULT_PARETO_ALGORITHM if self.goal.is_pareto else DEFAULT_ALGORITHM
            self.sweep.algorithm = default
        elif self.goal.is_pareto and self.sweep.algorithm not in MULTI_OBJECTIVE_ALGORITHMS:
            raise ValueError(
                f"sweep.algorithm {self.sweep.algorithm!r} optimises a single metric, but goal.target is 'pareto'; "
                f"use one of {list(MULTI_OBJECTIVE_ALGORITHMS)}"
            )
        return self

    def _check_prices_and_fleet(self) -> None:
        prices, space = self.goal.gpu_hour_usd, self.search_space
        if isinstance(prices, dict):
            unpriced = [sku for sku in space.inventory() if sku not in prices]
            if unpriced:
                where = f"search_space.hardware_sku {unpriced[0]!r}"
                if space.has_gpu_inventory:
                    where = f"{unpriced} of search_space.hardware"
                raise ValueError(f"goal.gpu_hour_usd prices {sorted(prices)} but not {where}; add a price")
        if space.has_gpu_inventory and self.calibration is not None and not self.calibration.off:
            raise ValueError(
                f"calibration scales the steps of one GPU type, and search_space.hardware lists "
                f"{list(space.hardware)}: remove calibration, or search one GPU type (hardware_sku + gpu_budget)"
            )

    @classmethod
    def model_json_schema(cls, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """The schema of the YAML a user writes: several workloads are a list under `workload`."""
        schema = super().model_json_schema(*args, **kwargs)
        schema["properties"].pop("workloads", None)  # the parsed form of that list, not a key to write
        schema["properties"].pop("dgdr", None)  # Spica writes it from a DGDR
        schema["properties"].pop("adapters_alias", None)  # Spica writes it from an `adapters:` section
        named = NamedWorkload.model_json_schema(ref_template="#/$defs/{model}")
        definitions = schema.setdefault("$defs", {})
        definitions.update(named.pop("$defs", {}))
        definitions["NamedWorkload"] = named
        listed = {"type": "array", "items": {"$ref": "#/$defs/NamedWorkload"}, "minItems": 1}
        schema["properties"]["workload"] = {"anyOf": [schema["properties"]["workload"], listed]}
        return schema

    def _resolve_stress(self) -> None:
        """The top deployments under perturbed step times: refused where there is no single order to check."""
        sweep = self.sweep
        if self.goal.is_pareto:
            asked = [f"sweep.{name}" for name in ("stress_top", "stress_band") if getattr(sweep, name) is not None]
            if asked and sweep.stress_top != 0:
                raise ValueError(
                    f"{' and '.join(asked)}: the stress test asks whether the recommendation stays first; "
                    "a 'pareto' goal has a front, not a first: remove them"
                )
            sweep.stress_top = 0
        if sweep.stress_band_source is not None and sweep.stress_band is None:
            raise ValueError("sweep.stress_band_source: Spica writes it when it sets the band; leave it out")
        if sweep.stress_band_roles is not None and sweep.stress_band_source is None:
            raise ValueError("sweep.stress_band_roles: Spica writes it from a calibration's measured errors; leave it out")
        if sweep.stress_top == 0:
            if sweep.stress_band is not None:
                raise ValueError("sweep.stress_band: sweep.stress_top is 0 (no stress test), so it would change nothing")
            return
        if sweep.stress_top == 1:
            raise ValueError("sweep.stress_top 1: the stress test compares the recommendation with the next ones; give 2 or more, or 0")
        if sweep.stress_top is None:
            sweep.stress_top = DEFAULT_STRESS_TOP
        if sweep.stress_band is not None:
            sweep.stress_band_source = sweep.stress_band_source or "sweep.stress_band, as given"
            return
        measured = self.calibration.measured_band() if self.calibration is not None else None
        if measured is not None:
            sweep.stress_band, sweep.stress_band_source = measured
            sweep.stress_band_roles = self.calibration.measured_role_bands()
        else:
            sweep.stress_band = DEFAULT_STRESS_BAND
            why = self.calibration.why_no_band() if self.calibration is not None else "no calibration"
            sweep.stress_band_source = f"the default {100 * DEFAULT_STRESS_BAND:.0f} % ({why})"

    def _resolve_search_sample(self) -> None:
        """`sweep.search_sample` into the workload's `search_requests` (traces/sample.py has the rule)."""
        mode = self.sweep.search_sample if self.sweep.search_sample is not None else DEFAULT_SEARCH_SAMPLE
        workload = self.workload
        if mode == "full" or workload.search_requests is not None:
            return  # searched whole, or already resolved (a normalised config read back)
        if not workload.is_trace_based or self.workloads:
            if self.sweep.search_sample is not None:
                raise ValueError(
                    f"sweep.search_sample {mode!r} samples a trace for the search; this config's traffic is "
                    f"{'several workloads' if self.workloads else 'synthetic'}: remove it"
                )
            return
        total = workload.expected_requests()
        percentile = self.goal.sla.percentile if self.goal.sla is not None else None
        # The search part's span, counted, not cut (validation writes nothing): a held-out fraction is the last of it.
        held = float(workload.holdout) if isinstance(workload.holdout, int | float) else 0.0
        span = scan_trace(workload.trace_path).duration_ms * (1 - held) if mode == "auto" else 0.0
        size = sample_size(total, percentile, span) if mode == "auto" else int(mode)
        if size is not None and size >= total:
            raise ValueError(f"sweep.search_sample {size} is not smaller than the {total} requests the search would "
                             "replay: give fewer, or `full`")  # fmt: skip
        if size is not None:
            workload.search_requests, workload.search_seed = size, self.sweep.seed

    def _resolve_capacity(self) -> None:
        sweep = self.sweep
        problem = self.why_no_capacity()
        if sweep.capacity_top is None:
            sweep.capacity_top = DEFAULT_CAPACITY_TOP if problem is None and self.goal.sla_coverage is not None else 0
        if sweep.capacity_top and problem:
            raise ValueError(f"sweep.capacity_top {sweep.capacity_top}: {problem}; remove it, or set it to 0")

    def why_no_capacity(self) -> str | None:
        """Why the winners' capacity within the SLA cannot be bisected here, or None when it can."""
        goal = self.goal
        if goal.is_pareto:
            return "a 'pareto' goal has a front, not a recommendation to size"
        if goal.sla is None or not (goal.sla.is_constraint or goal.sla_coverage is not None):
            return "capacity is the highest load within the SLA, and goal.sla has no percentile and no sla_coverage"
        for workload in self.workloads or [self.workload]:
            if workload.kv_load_ratio is not None or workload.concurrency is not None:
                return "a closed-loop workload (concurrency, kv_load_ratio) has no arrival rate to raise"
            if workload.is_trace_based and workload.replay_concurrency is not None:
                return "a closed-loop trace (replay_concurrency) has no arrival rate to raise"
        return None

    def _resolve_warm_start(self) -> None:
        per_candidate = [w for w in (self.workloads or [self.workload]) if w.kv_load_ratio is not None]
        if per_candidate and self.sweep.warm_start:
            raise ValueError(
                "sweep.warm_start ranks every layout by its estimate under the workload's traffic, but a "
                "kv_load_ratio workload's traffic is sized per candidate, so nothing can be ranked: remove it"
            )
        if self.sweep.warm_start is None:
            self.sweep.warm_start = not per_candidate

    def _resolve_baselines(self) -> None:
        per_candidate = any(w.kv_load_ratio is not None for w in (self.workloads or [self.workload]))
        why_not = (
            "goal.target is 'pareto': a front has no single score to divide by a baseline's"
            if self.goal.is_pareto
            else "a kv_load_ratio workload's traffic is sized per candidate, so there is no one traffic to "
            "replay the baselines on"
            if per_candidate
            else None
        )
        if why_not and self.sweep.baselines:
            raise ValueError(
                f"sweep.baselines compares the winner's score with each baseline's, but {why_not}: remove it"
            )
        if self.sweep.baselines is None:
            self.sweep.baselines = why_not is None

    def sample_size_warnings(self) -> list[str]:
        """Workloads too small for the SLA's percentile to be more than a request or two (config/goal.py)."""
        sla = self.goal.sla
        if sla is None or sla.percentile is None:
            return []
        needed = requests_for_percentile(sla.percentile)
        warnings = []
        for workload in self.workloads or [self.workload]:
            requests = workload.expected_requests()
            if requests is not None and requests < needed:
                name = f"workload {workload.name!r}" if isinstance(workload, NamedWorkload) else "the workload"
                tail = requests * (1 - sla.percentile / 100)
                warnings.append(
                    f"goal.sla.percentile {sla.percentile} on {requests} requests per replay: about {tail:.1f} "
                    f"request(s) lie beyond it in {name}, so it is decided by one or two requests; at least "
                    f"{needed} requests put {TAIL_REQUESTS} in its tail (raise num_request_ratio, or use a lower percentile)"
                )
        return warnings

    def _most_expected_requests(self) -> int | None:
        counts = [w.expected_requests() for w in (self.workloads or [self.workload])]
        return None if None in counts else max(counts)

    def _check_workload_list(self) -> None:
        score = self.goal.workload_score
        if self.workloads is None:
            if score is not None:
                raise ValueError(
                    f"goal.workload_score {score!r} combines the scores of several workloads, but workload is a "
                    "single workload: write workload as a list of named workloads, or remove it"
                )
            return
        names = [w.name for w in self.workloads]
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise ValueError(f"workload names must be distinct; repeated: {repeated}")
        if self.workload != self.workloads[0].traffic():
            raise ValueError("workload must be the first of workloads (write the list under workload)")
        weighted = [w.name for w in self.workloads if w.weight is not None]
        if weighted and score != "weighted_mean":
            raise ValueError(
                f"workload weights {weighted} only apply with goal.workload_score: weighted_mean "
                f"(the score is {score or 'worst'!r}, the worst workload's)"
            )
        if self.goal.is_pareto:
            raise ValueError("a 'pareto' goal takes one workload; several workloads are scored by one target")
        driven = [w.name for w in self.workloads if w.kv_load_ratio is not None]
        if driven:
            raise ValueError(
                f"workloads {driven} set kv_load_ratio, which sizes the load from each candidate; with several "
                "workloads give each a request_rate, concurrency or trace"
            )

    @classmethod
    def from_yaml(cls, path: str | Path) -> SmartSearchConfig:
        """Read and validate a config file; a relative `trace_path` is resolved from the file's folder."""
        path = Path(path)
        kind, data = read_input(path)
        if kind is InputKind.DGDR:  # mapped onto a config, its problems named by the DGDR's fields (config/dgdr.py)
            base_dir = path.resolve().parent
            return validated_dgdr(data, str(path), lambda mapped: cls.from_mapping(mapped, base_dir, str(path)))
        if kind is not InputKind.SWEEP:
            raise wrong_kind_error(kind, InputKind.SWEEP, str(path))
        refuse_written_dgdr(data, str(path))
        refuse_written_alias(data, str(path))
        return cls.from_mapping(data, base_dir=path.resolve().parent, source=str(path))

    @classmethod
    def from_mapping(
        cls, data: dict[str, Any], base_dir: Path | None = None, source: str | None = None
    ) -> SmartSearchConfig:
        context = {"base_dir": str(base_dir or Path.cwd())}
        adapters = read_adapters(data)  # upstream's `adapters:` read as Spica's knobs (config/adapters.py)
        try:
            config = cls.model_validate(adapters.data, context=context)
        except ValidationError as exc:
            # A workload list is written under `workload`: name its items there, as the user wrote them.
            problems = [(_user_path(path), message) for path, message in problems_from(exc, cls)]
            raise ConfigError(adapters.problems + adapters.relabelled(problems), source=source) from None
        if adapters.problems:
            raise ConfigError(adapters.problems, source=source)
        return config


def _is_pareto(goal: Any) -> bool:
    if isinstance(goal, OptimizationGoal):
        return goal.is_pareto
    if isinstance(goal, dict):
        target = goal.get("target", OptimizationTarget.THROUGHPUT.value)
        return target in (OptimizationTarget.PARETO, OptimizationTarget.PARETO.value)
    return False


def _user_path(path: str) -> str:
    return "workload" + path[len("workloads") :] if path.startswith("workloads[") else path
