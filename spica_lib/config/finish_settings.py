"""The finish's settings (`sweep.finish_*`, `goal.robustness`, `goal.equivalence_margin`, `goal.rare_event_share`):
their defaults, filled once, and their refusal where a finish could change nothing.

The finish replays the top of a ranking on fresh samples (results/finish.py). Its settings depend on each other and
on the workloads, so they are resolved together after the rest of the config is valid.
"""

from __future__ import annotations

from typing import Any

from spica_lib.config.goal import DEFAULT_EQUIVALENCE_SHARE, DEFAULT_RARE_EVENT_SHARE, EquivalenceMargin

# The config these functions resolve: a SmartSearchConfig (config/root.py) while its own validator runs. Typed loosely
# because root.py calls in here, and a module it calls never imports it back (tests/test_layering.py).
SmartSearchConfig = Any

# The finish's defaults: chosen from bench/robust_answers.py (docs/benchmarks/finish.md, "Answers on fresh traffic").
DEFAULT_FINISH_TOP = 4
# The sequential finish's first look and its cap per deployment (results/sequential.py): looks at 4, 8 and 16.
DEFAULT_FINISH_SAMPLES = 4
DEFAULT_FINISH_MAX_SAMPLES = 16
GOAL_FIELDS = ("robustness", "equivalence_margin", "rare_event_share")


def resolve_finish(config: SmartSearchConfig) -> None:
    """Fill the finish's defaults in place, or refuse a finish setting that would do nothing, naming it."""
    sweep, goal = config.sweep, config.goal
    why_not = why_no_finish(config)
    if why_not is not None:
        asked = [f"sweep.{name}" for name in ("finish_top", "finish_samples", "finish_max_samples") if getattr(sweep, name) is not None]
        asked += [f"goal.{name}" for name in GOAL_FIELDS if getattr(goal, name) is not None]
        asked += holdouts(config)
        if asked:
            raise ValueError(f"{' and '.join(asked)}: {why_not}")
        return  # left at None: no finish
    if sweep.finish_samples == 0:
        stray = [f"sweep.{n}" for n in ("finish_top", "finish_max_samples") if getattr(sweep, n) is not None]
        stray += [f"goal.{n}" for n in GOAL_FIELDS if getattr(goal, n) is not None]
        if stray or holdouts(config):
            raise ValueError(
                f"sweep.finish_samples is 0 (no finish), so {', '.join(stray + holdouts(config))} "
                "have nothing to rank or check: remove them, or give finish_samples"
            )
        return
    exact_only = one_held_out_replay_is_all(config)
    if exact_only:
        for name in ("finish_samples", "finish_max_samples"):
            if getattr(sweep, name) not in (None, 1):
                raise ValueError(
                    f"sweep.{name} {getattr(sweep, name)}: the held-out trace does not change and round robin "
                    "replays it exactly, so every sample after the first repeats it: give 1, or leave it out"
                )
        sweep.finish_samples = sweep.finish_max_samples = 1
    if sweep.finish_samples is None:
        sweep.finish_samples = min(DEFAULT_FINISH_SAMPLES, sweep.finish_max_samples or DEFAULT_FINISH_SAMPLES)
    if sweep.finish_max_samples is None:
        sweep.finish_max_samples = max(DEFAULT_FINISH_MAX_SAMPLES, sweep.finish_samples)
    elif sweep.finish_max_samples < sweep.finish_samples:
        raise ValueError(
            f"sweep.finish_max_samples {sweep.finish_max_samples} is below sweep.finish_samples "
            f"{sweep.finish_samples}, the samples every finished deployment gets first: give at least "
            f"{sweep.finish_samples}"
        )
    if sweep.finish_top is None:
        sweep.finish_top = DEFAULT_FINISH_TOP
    if goal.equivalence_margin is None:
        goal.equivalence_margin = EquivalenceMargin(relative=DEFAULT_EQUIVALENCE_SHARE)
    if goal.robustness is None:
        goal.robustness = "mean"
    elif goal.robustness != "mean" and sweep.finish_samples < 2:
        raise ValueError(
            f"goal.robustness {goal.robustness!r} is a statistic of several fresh samples, but "
            f"sweep.finish_samples is {sweep.finish_samples}: give at least 2"
        )
    _resolve_rare_event_share(config, exact_only)


def _resolve_rare_event_share(config: SmartSearchConfig, exact_only: bool) -> None:
    """goal.rare_event_share guards equivalence claims between sampled deployments: refused where none is made."""
    goal, sweep = config.goal, config.sweep
    why_not = (
        "the finish replays one held-out trace exactly, so its comparisons are facts about that traffic, not "
        "claims from samples a failure could hide between"
        if exact_only
        else "with sweep.finish_top 1 no deployment is compared with another, so none is called equivalent"
        if sweep.finish_top == 1
        else "the worst sample bounds nothing, so the finish calls no deployment equivalent"
        if goal.robustness == "worst"
        else None
    )
    if why_not is not None and goal.rare_event_share is not None:
        raise ValueError(f"goal.rare_event_share {goal.rare_event_share}: {why_not}; remove it")


def rare_event_share(config: SmartSearchConfig) -> float | None:
    """The share of traffic windows the finish's equivalences must resolve (results/rare_events.py): the goal's, or
    DEFAULT_RARE_EVENT_SHARE; None where the finish claims no equivalence between sampled deployments."""
    goal, sweep = config.goal, config.sweep
    if not sweep.finish_samples or (sweep.finish_top or 0) < 2 or goal.robustness == "worst":
        return None
    if one_held_out_replay_is_all(config):
        return None
    return float(goal.rare_event_share) if goal.rare_event_share is not None else DEFAULT_RARE_EVENT_SHARE


def holdouts(config: SmartSearchConfig) -> list[str]:
    """The workloads with a held-out part, by their field path."""
    if config.workloads:
        return [f"workload[{i}].holdout" for i, w in enumerate(config.workloads) if w.holdout is not None]
    return ["workload.holdout"] if config.workload.holdout is not None else []


def one_held_out_replay_is_all(config: SmartSearchConfig) -> bool:
    """Held-out traffic that does not change, replayed by exact round robin: one sample says everything."""
    workloads = config.workloads or [config.workload]
    return (
        bool(holdouts(config))
        and all(w.holdout is not None for w in workloads if w.is_trace_based)  # no trace resampled instead
        and not any(w.draws_arrivals for w in workloads)
        and "kv_router" not in config.search_space.router_mode
    )


def why_no_finish(config: SmartSearchConfig) -> str | None:
    """Why a finish could not change a ranking here, or None when it can."""
    if config.goal.is_pareto:
        return "the finish ranks the top deployments by fresh scores; a 'pareto' goal has a front, not a ranking"
    workloads = config.workloads or [config.workload]
    # Fresh traffic exists for open-loop synthetic arrivals, a trace's held-out part and a trace's resamples.
    fresh = any(w.draws_arrivals or w.is_trace_based for w in workloads)
    if not fresh and "kv_router" not in config.search_space.router_mode:
        return (
            "every replay here is exact (a closed-loop synthetic workload has no arrival draw and round robin "
            "breaks no ties), so a fresh sample repeats the search's score: remove it"
        )
    return None
