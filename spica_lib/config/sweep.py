"""`sweep`: how long and how wide the search runs, and which Vizier algorithm proposes candidates."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, StrictBool, StrictFloat, StrictInt, model_serializer, model_validator

from spica_lib.base.since import without_defaults
from spica_lib.config.strict import StrictModel

# Vizier designers that work on this stack. gp_ucb_pe is Vizier's DEFAULT designer.
Algorithm = Literal["gp_ucb_pe", "eagle", "nsga2", "gp_bandit", "random", "quasi_random"]
ALGORITHMS: tuple[str, ...] = Algorithm.__args__
# Designers that can optimise several metrics at once (a Pareto goal). EAGLE optimises one.
MULTI_OBJECTIVE_ALGORITHMS = ("gp_ucb_pe", "nsga2", "gp_bandit", "random", "quasi_random")
# Filled in when `algorithm` is left out. With the warm start, NSGA2 reached >= 98 % of the exhaustive
# best on every seed of four landscapes at 16 evaluations per branch, and beat plain random search on the
# median and the worst seed on each, for well under a second per round (docs/benchmarks/search-efficiency.md).
DEFAULT_ALGORITHM: Algorithm = "nsga2"
DEFAULT_PARETO_ALGORITHM: Algorithm = "nsga2"


# A replay on this stack costs about 0.1 ms per request warm on light traffic (1k requests in 0.13 s) and
# up to ~2 ms per request on long real-trace prompts (12k requests in 7-22 s); a queue that grows deep
# makes it 20x slower. The default limit gives every request 10 ms on top of a minute, within [60 s, 1 h].
LIMIT_FLOOR_SECONDS, LIMIT_SECONDS_PER_REQUEST, LIMIT_CEILING_SECONDS = 60.0, 0.010, 3600.0
UNKNOWN_SIZE_LIMIT_SECONDS = 600.0  # kv_load_ratio workloads: the request count is each candidate's own


def default_max_eval_seconds(requests: int | None) -> float:
    """The per-trial time limit when `max_eval_seconds` is not given, from the workload's request count."""
    if requests is None:
        return UNKNOWN_SIZE_LIMIT_SECONDS
    return min(LIMIT_CEILING_SECONDS, LIMIT_FLOOR_SECONDS + LIMIT_SECONDS_PER_REQUEST * requests)


class SweepConfig(StrictModel):
    """Rounds, fan-out, per-trial time limit, seed and algorithm of the search."""

    max_rounds: StrictInt = Field(default=20, ge=1)
    parallel_evals: StrictInt = Field(default=16, ge=1)
    candidates_per_round: StrictInt | None = Field(default=None, ge=1)
    # Rounds of a branch that replay at once. Round k is suggested as soon as round k - rounds_in_flight is
    # told, from everything told up to it, and steers clear of the trials the rounds still in flight replay;
    # so a slow replay holds back one round, not every slot. Which rounds a suggest sees is fixed by k,
    # never by timing: a seed still fixes the search. 1: every round waits for the one before (barrier).
    rounds_in_flight: StrictInt = Field(default=1, ge=1)
    # Required finite: without a limit a hung replay holds its job (and a SLURM allocation) indefinitely.
    # Left out, it is derived from the workload's size (`default_max_eval_seconds`) when the config is read.
    max_eval_seconds: StrictInt | StrictFloat = Field(default=UNKNOWN_SIZE_LIMIT_SECONDS, gt=0)
    seed: StrictInt = Field(default=0, ge=0)
    # On a trace: what the search replays. `full`: the whole trace (its search part); `auto`: a stratified sample
    # (traces/sample.py) sized by its rule, only where the trace holds twice that; a number: that many
    # requests. The finish always decides on the whole trace; config/root.py resolves it into the workload.
    search_sample: Literal["auto", "full"] | StrictInt | None = None

    algorithm: Algorithm | None = None  # None: chosen from the goal when the config is validated
    top_k: StrictInt = Field(default=3, ge=1)
    # The finish (results/finish.py): after the last round, the search's top `finish_top` distinct deployments are
    # replayed on at least `finish_samples` fresh traffic samples each (new Poisson arrival draws, which also
    # re-roll the KV router's tie-breaks; a block bootstrap of a trace; a trace's held-out part; on a closed loop,
    # repeats of the KV-router deployments), the same samples for all of them, and ranked by their fresh scores
    # with simultaneous intervals (results/confidence.py).
    # Left out: DEFAULT_FINISH_TOP and DEFAULT_FINISH_SAMPLES where a replay can differ from the search's,
    # none for a Pareto goal or where every replay is exact (set when the config is read). 0 samples: off.
    finish_top: StrictInt | None = Field(default=None, ge=1)
    finish_samples: StrictInt | None = Field(default=None, ge=0)
    # The finish is sequential (results/sequential.py): it starts with `finish_samples` samples per deployment and
    # adds samples, doubling, to the deployments still in contention until the recommendation is decided or each
    # has `finish_max_samples`. Left out: DEFAULT_FINISH_MAX_SAMPLES (at least finish_samples).
    finish_max_samples: StrictInt | None = Field(default=None, ge=1)
    # Early stops (needs goal.sla; replay/early_stop.py): a replay is stopped once a sound bound says it is
    # certain to miss a hard constraint or cannot reach the sweep's top scores; its first `screen_fraction`
    # of the requests is the prefix whose pace sets the rest's CPU budget (a time limit). null: none of them.
    screen_fraction: StrictFloat | None = Field(default=0.2, gt=0, lt=1)
    # Warm start: round 0 of each branch replays a diverse top set of its pool, ranked by aiconfigurator's
    # static estimate under the workload (search/warm_start.py), before the designer explores. Left out:
    # on, unless a workload's traffic depends on the candidate (kv_load_ratio), where nothing can be ranked.
    warm_start: StrictBool | None = None
    # Baselines (baselines/): next to the search, replay aiconfigurator's own pick, the best deployment
    # without the planner and the best with the default router, and state the winner's ratio over each.
    # Left out: on, unless the goal is a Pareto front (no single score to divide) or a workload's traffic
    # is sized per candidate (kv_load_ratio: no one traffic to replay every baseline on).
    baselines: StrictBool | None = None
    # Simulator error (results/stress.py): after the finish, the top `stress_top` deployments are replayed with
    # their prefill or decode step times scaled by 1 +/- `stress_band`, one at a time, and the summary says
    # whether the recommendation stays ahead. Left out: DEFAULT_STRESS_TOP and DEFAULT_STRESS_BAND for a
    # scalar goal, off for a Pareto goal. 0: off.
    stress_top: StrictInt | None = Field(default=None, ge=0)
    stress_band: StrictFloat | None = Field(default=None, gt=0, lt=1)
    # Where the band came from, written when the config is read: "sweep.stress_band" (given), the calibration's
    # measured held-out step-time error, or the default. Given without stress_band, it is refused.
    stress_band_source: str | None = None
    # Written by Spica with a calibration that measured each role's error: the prefill band from its held-out TTFT
    # error, the decode band from its TPOT error (stress_band is then the larger). Given, it is refused.
    stress_band_roles: dict[Literal["prefill", "decode"], float] | None = None
    # Capacity (results/capacity.py): after the finish, the top `capacity_top` deployments' highest load within
    # the SLA, by bisection with replays. Left out: DEFAULT_CAPACITY_TOP when goal.sla_coverage is set, else off.
    # 0: off.
    capacity_top: StrictInt | None = Field(default=None, ge=0)

    @model_serializer(mode="wrap")
    def _without_unset_search_sample(self, handler: Any) -> dict[str, Any]:
        return without_defaults(handler(self), self, search_sample=None)  # a sweep that did not say: as before

    @model_validator(mode="before")
    @classmethod
    def _no_screen_margin(cls, data: Any) -> Any:
        if isinstance(data, dict) and "screen_margin" in data:
            raise ValueError(
                f"screen_margin ({data['screen_margin']!r}) is gone: a replay is no longer stopped at a margin over a "
                "bound on a prefix (a guess that dropped deployments that would have ranked), only on bounds that "
                "hold whatever the rest of the traffic does (docs/trials.md, \"Early stops\"); remove it"
            )
        return data

    @model_validator(mode="after")
    def _rounds_in_flight_within_rounds(self) -> SweepConfig:
        if self.rounds_in_flight > self.max_rounds:
            raise ValueError(
                f"rounds_in_flight: {self.rounds_in_flight} rounds at once is more than max_rounds "
                f"({self.max_rounds}); the extra ones would never run: use at most {self.max_rounds}"
            )
        return self

    @property
    def per_round(self) -> int:
        """Unique successful replays each round aims for: left out, the slots split between the rounds in flight."""
        return self.candidates_per_round or max(1, self.parallel_evals // self.rounds_in_flight)
