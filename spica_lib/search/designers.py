"""The Vizier designers: built per round from files, seeded by (sweep seed, branch, round).

Fed the same completed trials, a designer makes the same suggestions in any process. There is no
database: the history is whatever the round files say.
"""

from __future__ import annotations

import hashlib
import os
from typing import Any

from spica_lib.search.space import BranchSpace

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
    # An on-disk cache saves ~40 % of GP-UCB-PE's time per round (docs/benchmarks/search-efficiency.md).
    cache = os.environ.get("SPICA_JAX_CACHE", os.path.join(os.path.expanduser("~"), ".cache", "spica", "jax"))
    jax.config.update("jax_compilation_cache_dir", cache)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)


DESIGNER_MODULES = {  # what each algorithm's designer imports (the GP ones also bring their model stack)
    "random": ("vizier._src.algorithms.designers.random",),
    "quasi_random": ("vizier._src.algorithms.designers.quasi_random",),
    "eagle": ("vizier._src.algorithms.designers.eagle_strategy.eagle_strategy",),
    "nsga2": ("vizier._src.algorithms.evolution.nsga2",),
    "gp_bandit": ("vizier._src.algorithms.designers.gp_bandit",),
    "gp_ucb_pe": ("vizier._src.algorithms.designers.gp_ucb_pe",),
}


def import_vizier() -> None:
    """Vizier's runtime settings and every designer's base (about half a second), without any designer."""
    configure_vizier_runtime()
    from vizier import algorithms  # noqa: F401


def import_designers(algorithm: str | None = None) -> None:
    """Import the designer of `algorithm`, or of every algorithm when None (a process that forks suggest jobs
    does it once, before its first fork). A sweep's warm host imports its own algorithm's only: the GP
    designers' stack alone takes over a second to import.

    Importing starts no JAX backend: the forked jobs start their own when they compute.
    """
    import importlib

    import_vizier()
    for name in DESIGNER_MODULES[algorithm] if algorithm else [m for ms in DESIGNER_MODULES.values() for m in ms]:
        importlib.import_module(name)


def round_seed(seed: int, branch: str, round_index: int, refill: int = 0) -> int:
    """A distinct, reproducible seed per (sweep seed, branch, round, refill pass)."""
    place = f"{seed}/{branch}/{round_index}" + (f"/{refill}" if refill else "")
    digest = hashlib.sha256(place.encode()).hexdigest()
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


def active_trial(trial_id: int, params: dict[str, Any]) -> Any:
    """A Vizier trial still being evaluated (a round in flight's), so the designer does not propose it again."""
    from vizier import pyvizier as vz

    return vz.Trial(id=trial_id, parameters=params)


def plain_parameters(suggestion: Any) -> dict[str, Any]:
    """A Vizier suggestion's parameters as JSON values."""
    out = {}
    for name, value in suggestion.parameters.as_dict().items():
        out[name] = value if isinstance(value, str) else float(value)
    return out
