"""A branch as Vizier parameters: knob choices, float ranges and layout features, and the decoding of a suggestion.

`BranchSpace` turns a branch (its knob choices, float ranges and pool) into flat Vizier parameters
and decodes a Vizier suggestion back into a selection and a parallel layout (via the projector).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from spica_lib.facts.parallel import DisaggConfig, ParallelConfig, ReplicaConfig
from spica_lib.pools.branches import BranchSpec, PoolRecord
from spica_lib.search.projection import FeatureParameter, ParallelConfigProjector, Projection

CONSTANT_PARAMETER = "_spica_constant"


class KnobParameter(BaseModel):
    """A searched knob as a Vizier parameter, and how to decode it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    kind: str  # "categorical" | "discrete" | "float"
    values: tuple[Any, ...] = ()  # Vizier-side values (strings for categorical, floats for discrete)
    choices: tuple[Any, ...] = ()  # the knob's own values, aligned with `values` (categorical by index)
    low: float | None = None
    high: float | None = None
    default: Any = None
    integer: bool = False


class Selection(BaseModel):
    """A decoded suggestion: the knob values and the layout they run on."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    values: dict[str, Any]
    parallel_config: ReplicaConfig | DisaggConfig
    projection: Projection | None = None


def _dedupe(values: list[Any]) -> list[Any]:
    out: list[Any] = []
    for value in values:
        if value not in out:
            out.append(value)
    return out


def knob_parameter(name: str, choices: list[Any]) -> KnobParameter:
    if any(isinstance(c, dict) for c in choices) or (
        not all(isinstance(c, str) for c in choices) and not all(_is_number(c) for c in choices)
    ):
        index = tuple(str(i) for i in range(len(choices)))
        return KnobParameter(name=name, kind="categorical", values=index, choices=tuple(choices), default="0")
    if all(isinstance(c, str) for c in choices):
        return KnobParameter(
            name=name, kind="categorical", values=tuple(choices), choices=tuple(choices), default=choices[0]
        )
    numbers = sorted(float(c) for c in choices)
    integer = all(isinstance(c, int) for c in choices)
    return KnobParameter(name=name, kind="discrete", values=tuple(numbers), default=numbers[0], integer=integer)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


class BranchSpace:
    """Vizier parameters of one branch and the decoding of a suggestion."""

    def __init__(self, spec: BranchSpec, pool: list[PoolRecord]):
        self.spec = spec
        self.pool = pool
        self.constants: dict[str, Any] = {"deployment_mode": spec.deployment_mode}
        self.knobs: list[KnobParameter] = []
        for name, choices in spec.knob_choices.items():
            distinct = _dedupe(list(choices))
            if len(distinct) == 1:
                self.constants[name] = distinct[0]
            else:
                self.knobs.append(knob_parameter(name, distinct))
        self.floats = [
            KnobParameter(name=name, kind="float", low=low, high=high, default=(low + high) / 2)
            for name, (low, high) in spec.float_ranges.items()
        ]
        self.projector = (
            ParallelConfigProjector([(r.config, r.backends) for r in pool], spec.gpu_budget) if pool else None
        )
        self.features: list[FeatureParameter] = self.projector.parameters if self.projector and len(pool) > 1 else []

    @property
    def parameter_names(self) -> list[str]:
        names = [p.name for p in self.knobs] + [p.name for p in self.floats] + [p.name for p in self.features]
        return names or [CONSTANT_PARAMETER]

    def search_space(self) -> Any:
        from vizier import pyvizier as vz

        space = vz.SearchSpace()
        root = space.root
        for knob in self.knobs:
            if knob.kind == "categorical":
                root.add_categorical_param(knob.name, list(knob.values), default_value=knob.default)
            else:
                root.add_discrete_param(knob.name, list(knob.values), default_value=knob.default)
        for param in self.floats:
            root.add_float_param(param.name, param.low, param.high, default_value=param.default)
        for feature in self.features:
            if feature.kind == "float":
                root.add_float_param(feature.name, feature.low, feature.high, default_value=feature.default)
            elif feature.kind == "discrete":
                root.add_discrete_param(
                    feature.name, list(feature.values), default_value=feature.default, scale_type=vz.ScaleType.LOG
                )
            else:
                root.add_categorical_param(feature.name, list(feature.values), default_value=feature.default)
        if not self.parameter_names or self.parameter_names == [CONSTANT_PARAMETER]:
            root.add_categorical_param(CONSTANT_PARAMETER, ["0"], default_value="0")
        return space

    def complete(self, params: dict[str, Any]) -> dict[str, Any]:
        """`params` with every missing parameter at its default.

        GP-UCB-PE (google-vizier 0.1.24) sometimes suggests a trial that names only some parameters.
        """
        defaults = {p.name: p.default for p in [*self.knobs, *self.floats, *self.features]}
        return {**{name: defaults[name] for name in self.parameter_names if name in defaults}, **params}

    def layout_parameters(self, config: ParallelConfig) -> dict[str, Any]:
        """The layout features' Vizier values at `config` (a point that projects onto it)."""
        if not self.features:
            return {}
        encoded = self.projector.encode(config)
        return {f.name: (v if isinstance(v := encoded[f.name], str) else float(v)) for f in self.features}

    def decode(self, params: dict[str, Any]) -> Selection:
        values = dict(self.constants)
        for knob in self.knobs:
            raw = params[knob.name]
            if knob.kind == "categorical":
                values[knob.name] = knob.choices[knob.values.index(str(raw))]
            else:
                values[knob.name] = int(round(float(raw))) if knob.integer else float(raw)
        for param in self.floats:
            values[param.name] = float(params[param.name])
        if len(self.pool) == 1:
            return Selection(values=values, parallel_config=self.pool[0].config)
        projection = self.projector.project(params, values["backend"])
        return Selection(values=values, parallel_config=projection.config, projection=projection)
