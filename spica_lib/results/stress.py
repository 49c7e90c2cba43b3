"""Would the recommendation still win if the simulator is off? The top deployments under perturbed step times.

The replay's step times come from aiconfigurator's perf DB, which is off from measured silicon by a
known amount per group (docs/fidelity/index.md). After the finish, the top `sweep.stress_top` deployments
(in the finish's order, the recommendation first) are replayed on the search's own traffic with
their prefill or their decode step times scaled by 1 ± `sweep.stress_band`, one at a time (the
mocker's `speedup_ratio` and `decode_speedup_ratio`, through the sample's step scales, so an opted-in
calibration is scaled on top). Each perturbed order is compared with the unperturbed order of the
same rows on the same traffic (their search replays): the recommendation keeps its place under a
perturbation when no other that was not above it unperturbed scores above it perturbed (an exact
tie is a tie); otherwise the perturbation is named: "if decode steps are 15 % slower than
simulated, #2 scores above #1". A round-robin replay on the same traffic is exact, so such a flip
is a fact of the simulator; one that involves a KV-router deployment may be its tie-breaks.

Replays that cannot change the verdict are not run. A static (no planner) round-robin deployment
on fixed traffic scores no better with slower steps than with the simulated ones: every request
waits at least as long, so latency, throughput and goodput can only get worse (the slow test in
tests/test_stress.py checks it on a real replay). So #1 is replayed first; another such deployment
whose unperturbed score is already at most #1's score under a slowing perturbation cannot score
above #1 under it, and that replay is skipped (status "skipped", `at_most` its bound). Faster
steps, planner and KV-router deployments give no such bound and are replayed; with a goodput goal,
after #1's, each with #1's score under the same perturbation as its prune bar (replay/early_stop.py):
only whether it overtakes #1 matters, so one whose score certainly stays below #1's there is stopped
on the way (status "pruned", `at_most` its score bound). On the 12k-request conversation trace #1
served 95 % of the traffic within the SLA, the others could pass it only by serving more, and their
perturbed replays ended at a quarter to a half of their length.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from spica_lib.replay.plan import build_deployment
from spica_lib.trial.screen import PruneBar, prune_rules
from spica_lib.trial.spec import TrialResult, TrialSpec, TrialStatus

STRESS_SEPARATOR = "~"  # "<trial key>~<perturbation>" (not "@": that separates a trial's workloads)
Role = Literal["prefill", "decode"]


class Perturbation(BaseModel):
    """One role's step times scaled by `scale` (> 1: slower than simulated)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    role: Role
    scale: float

    @property
    def name(self) -> str:
        return f"{self.role}x{self.scale:g}"

    @property
    def words(self) -> str:
        change = abs(self.scale - 1.0) * 100
        return f"{self.role} steps are {change:.0f} % {'slower' if self.scale > 1 else 'faster'} than simulated"


class StressedScore(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    key: str
    perturbation: Perturbation
    # skipped: bounded below #1 without a replay; pruned: stopped once certainly below #1 (module docstring)
    status: TrialStatus | Literal["skipped"]
    score: float | None = None
    at_most: float | None = None  # a skipped replay's bound (its unperturbed score), or a pruned one's score bound
    reason: str | None = None
    cpu_seconds: float = 0.0  # the replay's CPU time (bench/sweep_overhead.py counts every replay a sweep runs)


class StressResult(BaseModel):
    """Artifact `stress.json`: the top deployments under each perturbation, and the verdict."""

    model_config = ConfigDict(extra="forbid")

    band: float = 0.0  # the larger of the roles' bands
    bands: dict[str, float] = Field(default_factory=dict)  # per role, when they differ (a calibration measured each)
    keys: list[str] = Field(default_factory=list)  # the finish's order: the recommendation first
    exact: bool = True  # every replay round robin on the same traffic: a flip is not noise
    scores: list[StressedScore] = Field(default_factory=list)
    flips: list[str] = Field(default_factory=list)  # one sentence per perturbation under which another overtakes #1
    unperturbed: dict[str, float | None] = Field(default_factory=dict)  # each one's score without a perturbation
    sentence: str | None = None  # None: nothing was stressed

    @property
    def survives(self) -> bool | None:
        return None if not self.keys else not self.flips


Band = float | dict[str, float]  # one band for both roles, or one per role (a calibration's measured errors)


def role_band(band: Band, role: str) -> float:
    return float(band[role]) if isinstance(band, dict) else float(band)


def perturbations(band: Band) -> list[Perturbation]:
    return [Perturbation(role=role, scale=1.0 + sign * role_band(band, role)) for role in ("prefill", "decode")
            for sign in (1, -1)]  # fmt: skip


def perturbed(spec: TrialSpec, perturbation: Perturbation) -> TrialSpec:
    """`spec` with one role's step times scaled (on top of any calibration the sample already carries)."""
    sample = dict(spec.sample)
    for role in ("prefill", "decode"):
        field = f"{role}_step_scale"
        sample[field] = float(sample.get(field) or 1.0) * (perturbation.scale if role == perturbation.role else 1.0)
    goal, sla = spec.goal, spec.goal.sla
    plan = build_deployment(
        sample,
        backend_version=sample["backend_version"],
        optimization_target=goal.target.planner_optimization_target,
        sla_ttft_ms=sla.ttft_ms if sla else None,
        sla_itl_ms=sla.itl_ms if sla else None,
    )
    parts = [part.model_copy(update={"replay": part.replay.model_copy(update={"plan": plan})}) for part in spec.workloads or []]
    return spec.model_copy(
        update={"sample": sample, "replay": spec.replay.model_copy(update={"plan": plan}), "workloads": parts or None}
    )


def stress_specs(top: dict[str, TrialSpec], band: Band) -> dict[str, TrialSpec]:
    """The stress replays ("<key>~<perturbation>" -> spec) of the top deployments (key -> spec)."""
    return {stress_name(key, p): perturbed(spec, p) for key, spec in top.items() for p in perturbations(band)}


def stress_name(key: str, perturbation: Perturbation) -> str:
    return f"{key}{STRESS_SEPARATOR}{perturbation.name}"


def _bounded_by_first(spec: TrialSpec, perturbation: Perturbation) -> bool:
    """Whether this replay's score is at most the unperturbed one (module docstring): slower steps, static, round robin."""
    plan = spec.replay.plan
    return perturbation.scale > 1 and plan.is_static and plan.router_mode == "round_robin"


def _prunable(spec: TrialSpec) -> bool:
    """Whether a replay of this deployment can be pruned against a bar (a goodput goal's early stops)."""
    return not spec.workloads and prune_rules(spec.goal, spec.replay, spec.used_gpus, PruneBar(below=1.0, rank=1)) is not None


def _after_first(spec: TrialSpec, perturbation: Perturbation) -> bool:
    """Whether this replay of a deployment other than #1 waits for #1's score under the same perturbation: a
    bound may skip it, or that score is its prune bar."""
    return _bounded_by_first(spec, perturbation) or _prunable(spec)


def first_replays(top: dict[str, TrialSpec], band: Band) -> dict[str, TrialSpec]:
    """The stress replays to run before #1's perturbed scores are known: #1's, and every other one that needs none
    of them (no bound skips it and no bar prunes it)."""
    first = next(iter(top), None)
    return {stress_name(key, p): perturbed(spec, p) for key, spec in top.items() for p in perturbations(band)
            if key == first or not _after_first(spec, p)}  # fmt: skip


def second_replays(
    top: dict[str, TrialSpec], band: Band, results: dict[str, TrialResult], unperturbed: dict[str, float | None]
) -> dict[str, TrialSpec]:
    """The replays still needed once the first ones' `results` are in: the bounded ones whose unperturbed score is
    above #1's under the same perturbation (the bound does not settle them), and the prunable ones."""
    first = next(iter(top), None)
    return {stress_name(key, p): perturbed(spec, p) for key, spec in top.items() for p in perturbations(band)
            if key != first and _after_first(spec, p)
            and not (_bounded_by_first(spec, p) and _settled(unperturbed.get(key), results[stress_name(first, p)]))}  # fmt: skip


def stress_bars(top: dict[str, TrialSpec], band: Band, results: dict[str, TrialResult]) -> dict[str, PruneBar]:
    """Each prunable second replay's bar: #1's score under the same perturbation (none where #1 was not feasible
    there: any score is above that)."""
    first = next(iter(top), None)
    bars = {}
    for key, spec in top.items():
        for p in perturbations(band):
            mine = results.get(stress_name(first, p)) if first is not None else None
            if key != first and _prunable(spec) and mine is not None and mine.status == "feasible" and mine.score is not None:
                bars[stress_name(key, p)] = PruneBar(below=mine.score, rank=1)
    return bars


def _settled(unperturbed: float | None, first: TrialResult) -> bool:
    """Whether a bounded deployment with this unperturbed score cannot score above #1's perturbed `first`."""
    first_score = first.score if first.status == "feasible" else None
    return not _above(unperturbed, first_score)


def stressed(
    top: dict[str, TrialSpec], band: Band, results: dict[str, TrialResult], unperturbed: dict[str, float | None]
) -> StressResult:
    """The verdict from the stress replays' results ("<key>~<perturbation>" -> result; a replay the bound
    settled is absent); `top` in the finish's order, `unperturbed` each one's score on the same traffic
    without a perturbation (its search replay)."""
    keys = list(top)
    if len(keys) < 2:
        return StressResult(band=_largest(band), bands=_bands(band), keys=keys)
    scores = []
    for key in keys:
        for p in perturbations(band):
            result = results.get(stress_name(key, p))
            if result is None:
                if key == keys[0] or not _bounded_by_first(top[key], p):
                    raise KeyError(f"no stress replay of {stress_name(key, p)}")
                scores.append(StressedScore(key=key, perturbation=p, status="skipped", at_most=unperturbed.get(key),
                                            reason="at most its unperturbed score, which is not above #1's here"))  # fmt: skip
                continue
            if result.status == "pruned" and result.stop is not None and result.stop.score_bound is not None:
                why = (f"its score can reach at most {result.stop.score_bound:.4g}, below #1's {result.stop.below:.4g} "
                       "under this perturbation: it cannot overtake #1 here")  # fmt: skip
                scores.append(StressedScore(key=key, perturbation=p, status="pruned", at_most=result.stop.score_bound,
                                            reason=why, cpu_seconds=result.cpu_seconds))  # fmt: skip
                continue
            feasible = result.status == "feasible"
            scores.append(StressedScore(key=key, perturbation=p, status=result.status,
                                        score=result.score if feasible else None, reason=result.reason,
                                        cpu_seconds=result.cpu_seconds))  # fmt: skip
    flips = []
    first = keys[0]
    for p in perturbations(band):
        under = {s.key: s.score for s in scores if s.perturbation == p}
        overtaking = [
            k for k in keys[1:] if _above(under[k], under[first]) and not _above(unperturbed.get(k), unperturbed.get(first))
        ]
        if overtaking:
            names = " and ".join(f"#{keys.index(k) + 1}" for k in overtaking)
            verb = "scores" if len(overtaking) == 1 else "score"
            flips.append(f"if {p.words}, {names} {verb} above #1 (not so unperturbed on the same traffic)")
    exact = all(spec.replay.plan.router_mode != "kv_router" for spec in top.values())
    return StressResult(band=_largest(band), bands=_bands(band), keys=keys, exact=exact, scores=scores, flips=flips,
                        unperturbed=unperturbed, sentence=_sentence(keys, band, flips, exact))  # fmt: skip


def _largest(band: Band) -> float:
    return max(band.values()) if isinstance(band, dict) else float(band)


def _bands(band: Band) -> dict[str, float]:
    return dict(band) if isinstance(band, dict) else {}


def _above(a: float | None, b: float | None) -> bool:
    """Whether score `a` is strictly above `b` (None: infeasible, below every score; an exact tie is a tie)."""
    if a is None:
        return False
    return b is None or a > b


def _sentence(keys: list[str], band: Band, flips: list[str], exact: bool) -> str:
    others = f"the other {len(keys) - 1} of the top {len(keys)}"
    if not flips:
        steps = (f"prefill steps {100 * role_band(band, 'prefill'):.0f} % or decode steps "
                 f"{100 * role_band(band, 'decode'):.0f} %" if isinstance(band, dict)
                 else f"prefill or decode steps {100 * band:.0f} %")  # fmt: skip
        return f"#1 keeps its place against {others} on the search's traffic with {steps} slower or faster than simulated."
    caveat = "" if exact else " (a KV-router replay's tie-breaks add noise to these single replays)"
    return "The order depends on the simulator's error: " + "; ".join(flips) + caveat + "."
