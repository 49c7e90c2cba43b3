"""One deployment, several workloads: a trial's result from its result on each workload.

A deployment that must serve several workloads is only as good as it is on the one that binds:
it is feasible when it is feasible on every workload, and its score is its worst workload's
(`goal.workload_score: worst`, the default) or the weighted mean of its workloads' scores
(`weighted_mean`). Its headline metrics are those of the binding (worst-scoring) workload; every
workload's own outcome is kept in the result.
"""

from __future__ import annotations

from spica_lib.trial.spec import TrialResult, TrialSpec, WorkloadResult

PART_SEPARATOR = "@"  # trial keys are hex digests, so this cannot occur in one


def part_key(key: str, workload: str) -> str:
    """The key of one workload's replay of trial `key`."""
    return f"{key}{PART_SEPARATOR}{workload}"


def split_part_key(call_key: str) -> tuple[str, str | None]:
    """(trial key, workload name or None for a one-workload trial)."""
    key, _, name = call_key.partition(PART_SEPARATOR)
    return key, name or None


def combine_workloads(spec: TrialSpec, parts: dict[str, TrialResult]) -> TrialResult:
    """The trial's result from its result on each of its workloads (`spec.workloads`, all present)."""
    names = [part.name for part in spec.workloads or []]
    outcomes = {
        name: WorkloadResult(
            status=parts[name].status,
            reason=parts[name].reason,
            score=parts[name].score,
            sla_miss=parts[name].sla_miss,
            metrics=parts[name].metrics,
        )
        for name in names
    }
    totals = {
        "wall_seconds": sum(parts[n].wall_seconds for n in names),
        "cpu_seconds": sum(parts[n].cpu_seconds for n in names),
        "replay_seconds": sum(parts[n].replay_seconds for n in names),
    }
    common = {"used_gpus": spec.used_gpus, "versions": parts[names[0]].versions, "workloads": outcomes, **totals}
    misses = [parts[n].sla_miss for n in names if parts[n].sla_miss is not None]
    worst_miss = max(misses) if misses else None
    for status in ("failed", "timed_out", "infeasible"):
        failing = [n for n in names if parts[n].status == status]
        if failing:
            reason = "; ".join(f"workload {n}: {parts[n].reason}" for n in failing)
            binding = max(failing, key=lambda n: parts[n].sla_miss or 0.0)  # the one missing the SLA furthest
            return TrialResult(status=status, reason=reason, sla_miss=worst_miss, binding_workload=binding, **common)
    scores = {n: float(parts[n].score) for n in names if parts[n].score is not None}
    if len(scores) != len(names):
        unscored = [n for n in names if n not in scores]
        return TrialResult(status="failed", reason=f"workloads {unscored} were not scored", **common)
    binding = min(names, key=lambda n: scores[n])  # scores are higher-is-better
    if spec.goal.workload_score == "weighted_mean":
        weights = {part.name: part.weight for part in spec.workloads or []}
        score = sum(weights[n] * scores[n] for n in names) / sum(weights.values())
    else:
        score = scores[binding]
    chosen = parts[binding]
    return TrialResult(
        status="feasible",
        metrics=chosen.metrics,
        score=score,
        average_gpus=chosen.average_gpus,
        sla_miss=worst_miss,
        scaling_events=chosen.scaling_events,
        binding_workload=binding,
        **common,
    )
