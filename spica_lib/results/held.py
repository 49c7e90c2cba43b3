"""Held first, look by look: which finished deployments met the SLA as often as the best of those given as many samples.

A deployment that misses the SLA on a compared sample must not hide the miss by the way the finish samples: the
sequential finish stops giving samples to a deployment shown behind, so the samples every deployment got are only
the first look's, and a deployment that misses later would be judged on those alone. So "held" is judged at every
look, among the deployments given that look's samples, as a rate over the samples each has finished: one given
more samples is compared only with those given as many, so it is not penalised for being sampled longer, and a
miss only ever costs the deployment that missed.

A sample whose replay hit its time limit is not a miss: the replay did not finish, so the deployment is undecided
on that sample (a time-out comes from a queue so deep it crawls, and it would crawl again). It is left out of the
rate, and results/confidence.py never calls such a deployment equivalent.
"""

from __future__ import annotations

from fractions import Fraction

from spica_lib.results.finish import FinishedDeployment, SampleOutcome

UNDECIDED_STATUSES = ("timed_out",)  # the replay did not finish: no verdict on the deployment from that sample


def finished_samples(samples: list[SampleOutcome]) -> list[SampleOutcome]:
    """The samples whose replay came to an end (met the SLA or not)."""
    return [s for s in samples if s.status not in UNDECIDED_STATUSES]


def misses(d: FinishedDeployment) -> int:
    """Samples it finished without meeting the SLA (or whose replay failed)."""
    return sum(s.status != "feasible" for s in finished_samples(d.samples))


def time_limits(d: FinishedDeployment) -> int:
    return sum(s.status in UNDECIDED_STATUSES for s in d.samples)


def held_rate(samples: list[SampleOutcome]) -> Fraction | None:
    """The share of finished samples that met the SLA, exactly (None: none finished)."""
    done = finished_samples(samples)
    return Fraction(sum(s.status == "feasible" for s in done), len(done)) if done else None


def fell_behind_on_held(compared: dict[str, FinishedDeployment], looks: list[int]) -> dict[str, int]:
    """Deployment key -> the sample count at which it met the SLA less often than the best of those given as many
    samples (left out: it held as often as the best at every look it was given). `compared` holds each deployment
    on its compared samples; a look is each planned look and each deployment's own count."""
    counts = {key: len(d.samples) for key, d in compared.items()}
    most = max(counts.values(), default=0)
    checkpoints = sorted({n for n in looks if 0 < n <= most} | {n for n in counts.values() if n > 0})
    fell: dict[str, int] = {}
    for n in checkpoints:
        group = {key: held_rate(d.samples[:n]) for key, d in compared.items() if counts[key] >= n and key not in fell}
        rates = {key: rate for key, rate in group.items() if rate is not None}
        if not rates:
            continue
        best = max(rates.values())
        fell.update({key: n for key, rate in rates.items() if rate < best})
    return fell
