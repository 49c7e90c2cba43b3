"""What the finish says of each finished deployment (`FinishedRank`) and of the finish (`FinishVerdict`).

They are written into finish verdicts of summary.json and the ranking's finish columns; how they are decided is
results/confidence.py, and the sentence that explains them results/finish_sentence.py.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

CONFIDENCE = 0.95  # for the family of claims of one finish
COST_TOLERANCE = 0.01  # costs within 1 % are equal (average GPUs of 2.9999999999999964 and 3.0 are one cost)
Verdict = Literal["equivalent", "behind", "undecided", "missed", "unscored"]


class FinishedRank(BaseModel):
    """A finished deployment's standing among the finished top."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    key: str
    search_score: float  # on the search's own sample, for comparison
    # goal.robustness of all its scored samples, its own precision samples included (None: it scored on none):
    # the level it reports. Comparisons use only the samples it shares with the others (`compared`).
    statistic: float | None
    mean: float | None
    sd: float | None
    # The statistic's standard error over its samples (a paired bootstrap for every statistic; 0 for exact replays).
    se: float | None = None
    worst: float | None
    scored: int  # samples it was feasible on
    samples: int  # samples it was given
    compared: int = 0  # of them, the samples it shares with another finished deployment (every comparison's)
    timed_out: int = 0  # samples whose replay hit its time limit (not an SLA miss: the replay did not finish)
    # Of its compared samples: those it finished without meeting the SLA, and those that hit the time limit (on
    # which it is undecided: results/held.py).
    compared_misses: int = 0
    compared_time_limits: int = 0
    held: bool  # met the SLA on every compared sample it finished
    behind: float | None = None  # the leader's statistic minus this one's, on the compared samples (0: the leader)
    # Simultaneous 95 % bounds on how far it is behind the best of the others (None: not bounded that way).
    behind_low: float | None = None
    behind_high: float | None = None
    # The bounds are facts about the one traffic replayed (exact replays), not 95 % claims about other traffic.
    on_this_traffic: bool = False
    verdict: Verdict = "undecided"
    beyond_margin: bool = False  # shown more than the equivalence margin behind the best
    # Its bounds put it within the margin of the best, but on too few compared samples to rule out a failure on
    # goal.rare_event_share of traffic windows (results/rare_events.py): not separated, so not called equivalent.
    too_few_for_rare_events: bool = False
    # Among the deployments not shown behind, the share of resamples in which it has the best statistic (None:
    # shown behind, so not in contention).
    p_best: float | None = None
    leader: bool = False
    recommended: bool = False
    failed_samples: list[str] = []
    # Means over its fresh samples: the SLA's worst ratio to its bound, and the sample metrics (results/finish.py).
    sla_miss: float | None = None
    metrics: dict[str, float] = Field(default_factory=dict)

    @property
    def equivalent(self) -> bool:
        return self.verdict == "equivalent"

    @property
    def own_samples(self) -> int:
        """Samples no other deployment was given (the recommendation's, for its level's precision)."""
        return self.samples - self.compared


class FinishVerdict(BaseModel):
    """The finished top in its final order (the recommendation first) and the sentence that explains it."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    robustness: str
    kind: str
    samples_min: int
    samples_max: int
    margin: float | None = None  # the equivalence margin in the goal's unit
    margin_text: str | None = None
    ranks: list[FinishedRank]
    sentence: str
    # Whether more samples could still change the recommendation (an undecided contender it would yield to).
    decided: bool = True
    open_keys: list[str] = Field(default_factory=list)  # the contenders still undecided that could change it
    contender_keys: list[str] = Field(default_factory=list)  # not shown behind: they get the next look's samples
    # Within the margin on too few samples, and preferred to the recommendation were they shown equivalent: they and
    # the deployments they are compared with get samples up to `rare_samples`, and no other deployment does.
    rare_keys: list[str] = Field(default_factory=list)
    rare_samples: int | None = None  # compared samples an equivalence needs (goal.rare_event_share; None: no check)
    # How many paired samples a claim needs with this statistic at this family's level (None: none can be made);
    # when the finish's most samples are fewer, more samples cannot decide anything and none are drawn for that.
    samples_for_a_claim: int | None = None
    # Kendall's tau between the search's order of the finished top and their order on fresh samples
    # (1: the same order; None with fewer than 2, or when either order is all ties).
    kendall_tau: float | None = None
    # Whether the recommendation met the SLA on every fresh sample it was given (None without an SLA).
    recommended_meets_sla: bool | None = None

    @property
    def recommended(self) -> FinishedRank | None:
        return self.ranks[0] if self.ranks else None
