"""`sweep`: how long and how wide the search runs, and which Vizier algorithm proposes candidates."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, StrictFloat, StrictInt

from spica_lib.config.strict import StrictModel

# Vizier designers that work on this stack. gp_ucb_pe is Vizier's DEFAULT designer.
Algorithm = Literal["gp_ucb_pe", "eagle", "nsga2", "gp_bandit", "random", "quasi_random"]
ALGORITHMS: tuple[str, ...] = Algorithm.__args__
# Designers that can optimise several metrics at once (a Pareto goal). EAGLE optimises one.
MULTI_OBJECTIVE_ALGORITHMS = ("gp_ucb_pe", "nsga2", "gp_bandit", "random", "quasi_random")
# Filled in when `algorithm` is left out. NSGA2 found the best of a 270-configuration grid in
# 15 % of its evaluations on every seed, for <0.1 s per round (docs/benchmarks.md).
DEFAULT_ALGORITHM: Algorithm = "nsga2"
DEFAULT_PARETO_ALGORITHM: Algorithm = "nsga2"


class SweepConfig(StrictModel):
    """Rounds, fan-out, per-trial time limit, seed and algorithm of the search."""

    max_rounds: StrictInt = Field(default=20, ge=1)
    parallel_evals: StrictInt = Field(default=16, ge=1)
    candidates_per_round: StrictInt | None = Field(default=None, ge=1)
    # Required finite: without a limit a hung replay holds its job (and a SLURM allocation) indefinitely.
    max_eval_seconds: StrictInt | StrictFloat = Field(default=600.0, gt=0)
    seed: StrictInt = Field(default=0, ge=0)
    algorithm: Algorithm | None = None  # None: chosen from the goal when the config is validated
    top_k: StrictInt = Field(default=3, ge=1)

    @property
    def per_round(self) -> int:
        """Unique successful replays each round aims for."""
        return self.candidates_per_round or self.parallel_evals
