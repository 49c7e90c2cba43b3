"""The sampler: a Vizier study per branch, rebuilt from files every round.

`BranchSpace` turns a branch (its knob choices, float ranges and pool) into flat Vizier parameters
and decodes a Vizier suggestion back into a selection and a parallel layout (via the projector).
`make_designer` builds the configured Vizier designer with a seed fixed by (sweep seed, branch,
round); fed the same completed trials it makes the same suggestions in any process. There is no
database: the history is whatever the round files say.
"""

from __future__ import annotations

import hashlib
import os
from typing import Any

from pydantic import BaseModel, ConfigDict

from spica_lib.branches import BranchSpec, PoolRecord
from spica_lib.parallel import DisaggConfig, ReplicaConfig
from spica_lib.projection import FeatureParameter, ParallelConfigProjector, Projection

CONSTANT_PARAMETER = "_spica_constant"
WORST = 1e30  # metric value given to infeasible trials for designers that need one (NSGA2)


def configure_vizier_runtime() -> None:
    """CPU JAX, a persistent compilation cache and quiet loggers; called before Vizier is used
    (never at package import)."""
    import logging

    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    for name in ("jax", "jax._src.xla_bridge", "absl", "vizier"):
        logging.getLogger(name).setLevel(logging.ERROR)
    import jax

    # Every round is a new process; the GP designers recompile the same XLA programs each time.
    # An on-disk cache saves ~40 % of GP-UCB-PE's time per round (docs/benchmarks.md).
    cache = os.environ.get("SPICA_JAX_CACHE", os.path.join(os.path.expanduser("~"), ".cache", "spica", "jax"))
    jax.config.update("jax_compilation_cache_dir", cache)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)


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


def round_seed(seed: int, branch: str, round_index: int) -> int:
    """A distinct, reproducible seed per (sweep seed, branch, round)."""
    digest = hashlib.sha256(f"{seed}/{branch}/{round_index}".encode()).hexdigest()
    return int(digest[:8], 16) % (2**31 - 1)


def problem_statement(space: BranchSpace, objectives: list[tuple[str, bool]]) -> Any:
    from vizier import pyvizier as vz

    problem = vz.ProblemStatement(search_space=space.search_space())
    for name, maximize in objectives:
        goal = vz.ObjectiveMetricGoal.MAXIMIZE if maximize else vz.ObjectiveMetricGoal.MINIMIZE
        problem.metric_information.append(vz.MetricInformation(name=name, goal=goal))
    return problem


def make_designer(algorithm: str, problem: Any, seed: int, sweep_seed: int, suggested_before: int) -> Any:
    """The Vizier designer for `algorithm`, seeded for this round."""
    configure_vizier_runtime()
    if algorithm == "random":
        from vizier._src.algorithms.designers.random import RandomDesigner

        return RandomDesigner(problem.search_space, seed=seed)  # a new seed each round: no repeats
    if algorithm == "quasi_random":
        from vizier._src.algorithms.designers.quasi_random import QuasiRandomDesigner

        # One sequence for the whole sweep, continued past the points already issued.
        return QuasiRandomDesigner(problem.search_space, seed=sweep_seed, skip_points=1000 + suggested_before)
    if algorithm == "eagle":
        from vizier._src.algorithms.designers.eagle_strategy.eagle_strategy import EagleStrategyDesigner

        return EagleStrategyDesigner(problem, seed=seed)
    if algorithm == "nsga2":
        from vizier._src.algorithms.evolution.nsga2 import NSGA2Designer

        return NSGA2Designer(problem, seed=seed)
    if algorithm == "gp_bandit":
        from vizier._src.algorithms.designers.gp_bandit import VizierGPBandit

        return VizierGPBandit.from_problem(problem, seed=seed)
    if algorithm == "gp_ucb_pe":
        return _fast_gp_ucb_pe(problem, seed)
    raise ValueError(f"unknown algorithm {algorithm!r}")


def _fast_gp_ucb_pe(problem: Any, seed: int) -> Any:
    """GP-UCB-PE with a smaller acquisition search (Vizier's default spends minutes per suggest here)."""
    import jax
    from vizier._src.algorithms.designers import gp_ucb_pe
    from vizier._src.algorithms.optimizers import eagle_strategy as es
    from vizier._src.algorithms.optimizers import vectorized_base as vb

    factory = vb.VectorizedOptimizerFactory(
        strategy_factory=es.VectorizedEagleStrategyFactory(
            eagle_config=gp_ucb_pe.VizierGPUCBPEBandit.default_eagle_config
        ),
        max_evaluations=2_000,
        suggestion_batch_size=25,
    )
    return gp_ucb_pe.VizierGPUCBPEBandit(
        problem, acquisition_optimizer_factory=factory, ard_random_restarts=1, rng=jax.random.PRNGKey(seed)
    )


def vizier_trial(trial_id: int, params: dict[str, Any], metrics: dict[str, float] | None, reason: str | None) -> Any:
    """A completed Vizier trial from a stored observation."""
    from vizier import pyvizier as vz

    trial = vz.Trial(id=trial_id, parameters=params)
    if reason is not None:
        trial.complete(vz.Measurement(metrics=metrics or {}), infeasibility_reason=reason)
    else:
        trial.complete(vz.Measurement(metrics=metrics or {}))
    return trial


def plain_parameters(suggestion: Any) -> dict[str, Any]:
    """A Vizier suggestion's parameters as JSON values."""
    out = {}
    for name, value in suggestion.parameters.as_dict().items():
        out[name] = value if isinstance(value, str) else float(value)
    return out
