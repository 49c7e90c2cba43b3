"""A DGDR's `features`: the KV router and the planner as Spica's router and planner knobs.

- `kvRouter.enabled` pins the router: true to the KV router, false to round robin. Not given, Spica searches
  both (its default question), which a DGDR cannot ask for.
- `planner` (Dynamo's `PlannerConfig`; given, the deployment gets a planner) puts the planner in the replay
  where the replay simulates its fields: the scaling modes and intervals, the forward-pass-metric sampling,
  the load sensitivity, the load predictor and the floors (`min_endpoint`, `min_gpu_budget`), each pinned to
  the given value or the planner's own default. What Spica derives from the rest of the request
  (`max_gpu_budget`, `optimization_target`, `ttft_ms`, `itl_ms`, `backend`, `environment`) is accepted where
  it says the same; `mode` pins the deployment mode; every other field is refused by name, since no replay
  could rank a deployment by it. Not given, Spica searches without and with its default question's planner.
- `mocker` asks for simulated workers: there is nothing to search in it (Spica's replay already runs Dynamo's
  mocker engines), so it is noted and the deployment files run real workers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from spica_lib.config.goal import OptimizationTarget
from spica_lib.config.knobs import KNOBS
from spica_lib.config.narrow import narrowed
from spica_lib.config.presets import PREDICTOR_FAMILIES

SCALING = ("enable_throughput_scaling", "enable_load_scaling", "throughput_adjustment_interval_seconds",
           "load_adjustment_interval_seconds")  # fmt: skip
FPM = ("max_num_fpm_samples", "fpm_sample_bucket_size")
SENSITIVITY = ("load_scaling_down_sensitivity", "load_min_observations")
PREDICTOR = ("load_predictor", "load_predictor_log1p", "prophet_window_size", "kalman_q_level", "kalman_q_trend",
             "kalman_r", "kalman_min_points")  # fmt: skip
FLOORS = ("min_endpoint", "min_gpu_budget")
DERIVED = ("max_gpu_budget", "optimization_target", "ttft_ms", "itl_ms", "backend", "environment", "mode")
NOT_READ = {
    "namespace": "the deployed planner's Dynamo namespace is the operator's",
    "pre_deployment_sweeping_mode": "Spica replays instead of sweeping before deployment",
}
PLANNER = "spec.features.planner"
ROUTER, MODE = KNOBS["router_mode"], KNOBS["deployment_mode"]  # the knobs a DGDR's features pin
NARROWING = (ROUTER.name, "planner_scaling_policy", MODE.name)


@dataclass
class MappedFeatures:
    search_space: dict[str, Any]
    notes: list[str] = field(default_factory=list)
    origins: dict[str, str] = field(default_factory=dict)
    problems: list[tuple[str, str]] = field(default_factory=list)


def map_features(
    raw: dict[str, Any], typed: Any, space: dict[str, Any], goal: dict[str, Any], spec: dict[str, Any]
) -> MappedFeatures:
    """The search space with the DGDR's router and planner features applied, and what was said about them."""
    out = MappedFeatures(search_space=space)
    lists: dict[str, list[Any]] = {}
    enabled = (raw.get("kvRouter") or {}).get("enabled")
    out.origins["search_space.router_mode"] = "spec.features.kvRouter.enabled"
    if enabled is None:
        routers = space.get("router_mode", ROUTER.role_default(None))
        out.notes.append(f"spec.features.kvRouter.enabled (not given) -> search_space.router_mode {routers}: Spica "
                         "searches both routers (its default); give true or false to pin one")  # fmt: skip
    else:
        kv_router, round_robin = ROUTER.choices
        lists["router_mode"] = [kv_router if typed.kvRouter.enabled else round_robin]
    if raw.get("planner") is None:
        policies = space.get("planner_scaling_policy", "every preset")
        out.notes.append(f"{PLANNER} (not given) -> search_space.planner_scaling_policy {policies}: Spica searches "
                         "without and with a planner (config/default.yaml); Dynamo would deploy none")  # fmt: skip
    else:
        lists.update(_planner(raw["planner"], typed.planner, goal, spec, out))
    if (raw.get("mocker") or {}).get("enabled") is not None:
        out.notes.append("spec.features.mocker -> nothing to search: Spica's replay runs Dynamo's mocker engines "
                         "already; the deployment files run real workers")  # fmt: skip
    # Narrowed first, so that what a pinned router, planner or mode makes inert leaves with it; then what was given.
    narrowing = {k: v for k, v in lists.items() if k in NARROWING}
    out.search_space = {**narrowed(space, **narrowing), **{k: v for k, v in lists.items() if k not in NARROWING}}
    return out


def _planner(
    raw: dict[str, Any], planner: Any, goal: dict[str, Any], spec: dict[str, Any], out: MappedFeatures
) -> dict[str, Any]:
    """The planner knobs a `features.planner` pins, after refusing what the replay cannot simulate."""
    lists: dict[str, Any] = {}
    out.problems += _derived_problems(raw, planner, goal, spec)
    for key in set(NOT_READ) & set(raw):
        out.notes.append(f"{PLANNER}.{key} -> not read: {NOT_READ[key]}")
    if raw.get("mode") in MODE.choices:
        lists["deployment_mode"] = [raw["mode"]]
        out.origins["search_space.deployment_mode"] = f"{PLANNER}.mode"
        out.notes.append(f"{PLANNER}.mode {raw['mode']} -> search_space.deployment_mode [{raw['mode']}]")
    policy = {key: getattr(planner, key) for key in SCALING}
    scales = policy["enable_throughput_scaling"] or policy["enable_load_scaling"]
    lists["planner_scaling_policy"] = [policy if scales else "disabled"]
    filled = [key for key in SCALING if key not in raw]
    out.notes.append(f"{PLANNER} -> search_space.planner_scaling_policy {lists['planner_scaling_policy']}: the planner "
                     "in the replay" + (f"; {filled} are the PlannerConfig's defaults" if filled else ""))  # fmt: skip
    groups = (
        ("planner_fpm_sampling", FPM, scales),
        ("planner_load_sensitivity", SENSITIVITY, policy["enable_load_scaling"]),
        ("load_predictor_candidates", PREDICTOR, policy["enable_throughput_scaling"]),
    )
    for knob, keys, used in groups:
        out.origins[f"search_space.{knob}"] = PLANNER
        if used or set(keys) & set(raw):  # given where it steers nothing: SearchSpace refuses it, by this path
            lists[knob] = [_entry(knob, keys, planner, out)]
    for key in FLOORS:
        out.origins[f"search_space.{key}"] = f"{PLANNER}.{key}"
        value = raw.get(key)
        if value is not None and not (key == "min_gpu_budget" and value <= 0):  # the planner's -1: no floor
            lists[key] = value
    return lists


def planner_key_problems(raw: Any, known: set[str]) -> list[tuple[str, str]]:
    """A `features.planner`'s keys Dynamo's PlannerConfig (`known`) does not have, or the replay does not simulate."""
    if raw is None:
        return []
    if not isinstance(raw, dict):
        return [(PLANNER, "a mapping of Dynamo's PlannerConfig fields")]
    supported = sorted({*SCALING, *FPM, *SENSITIVITY, *PREDICTOR, *FLOORS, *DERIVED, *NOT_READ})
    found = []
    for key in raw:
        if key not in known:
            found.append((f"{PLANNER}.{key}", f"unknown key of Dynamo's PlannerConfig; Spica takes {supported}"))
        elif key not in supported:
            found.append((f"{PLANNER}.{key}", "the replay does not simulate it, so no replay-ranked answer can "
                          f"include it; remove it (Spica takes {supported})"))  # fmt: skip
    return found


def _entry(knob: str, keys: tuple[str, ...], planner: Any, out: MappedFeatures) -> dict[str, Any]:
    entry = {key: getattr(planner, key) for key in keys}
    if knob != "load_predictor_candidates":
        return entry
    family = entry["load_predictor"]
    if family not in PREDICTOR_FAMILIES:
        out.problems.append((f"{PLANNER}.load_predictor", f"{family!r}: the replay's predictors are "
                             f"{list(PREDICTOR_FAMILIES)}"))  # fmt: skip
    own = {"prophet": ("prophet_window_size",), "kalman": tuple(k for k in keys if k.startswith("kalman_"))}
    return {key: entry[key] for key in ("load_predictor", "load_predictor_log1p", *own.get(family, ()))}


def _derived_problems(raw: dict[str, Any], planner: Any, goal: dict[str, Any], spec: dict[str, Any]) -> list:
    """Planner fields Spica sets from the rest of the request: refused where they say something else."""
    target = OptimizationTarget(goal["target"]).planner_optimization_target
    sla = goal.get("sla") or {}
    budget = (spec.get("hardware") or {}).get("totalGpus")
    expected = {
        "max_gpu_budget": (budget, "spec.hardware.totalGpus"),
        "optimization_target": (target, f"the goal ({goal['target']})"),
        "ttft_ms": (sla.get("ttft_ms") if target == "sla" else None, "spec.sla.ttft"),
        "itl_ms": (sla.get("itl_ms") if target == "sla" else None, "spec.sla.itl"),
        "backend": (spec.get("backend"), "spec.backend"),
        "environment": ("kubernetes", "the deployment files (Kubernetes)"),
    }
    found = []
    for key, (value, source) in expected.items():
        if key in raw and raw[key] != value:
            found.append((f"{PLANNER}.{key}", f"{raw[key]!r}: Spica sets it from {source}, which says {value!r}; "
                          "make them agree, or leave it out"))  # fmt: skip
    if "mode" in raw and raw["mode"] not in MODE.choices:
        found.append((f"{PLANNER}.mode", f"{raw['mode']!r}: a planner of one role is not a deployment Spica searches; "
                      "give agg or disagg (it pins the deployment mode), or leave it out"))  # fmt: skip
    return found
