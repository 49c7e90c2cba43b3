"""What a finish's samples cannot see: a failure on a small share of traffic windows that none of them happened to hit.

No interval sees an event missing from its data. A deployment equal to the best on 90 % of traffic windows and 60 %
lower on the other 10 % is truly 6 % behind, yet on 8 fresh samples none of them collapses 43 % of the time, and
every bound computed from those samples calls it "within 5 %". So a claim that could recommend such a deployment
(an equivalence, "fewer GPUs for the same") is made only on enough compared samples that a failure on at least
`goal.rare_event_share` of windows would have shown with probability 1 - RARE_ALPHA: n with
(1 - share)^n <= RARE_ALPHA.

RARE_ALPHA is this check's part of the family's error (results/verdict.py CONFIDENCE): the finish's 5 % is split into
its "behind" claims (half), its equivalence bounds (a quarter) and this check (a quarter), so that a wrong
equivalence, whether from a bound or from a collapse no sample hit, stays within the 2.5 % the equivalence side is
given, and every claim of one finish still holds together at 95 %. At the default 10 % share that is 42 samples;
bench/decision_errors.py measures the rate at exactly that share.
"""

from __future__ import annotations

import math

from spica_lib.results.verdict import CONFIDENCE

RARE_ALPHA = (1 - CONFIDENCE) / 4


def samples_to_see(share: float, alpha: float = RARE_ALPHA) -> int:
    """The fewest samples on which a failure hitting `share` of traffic windows shows at least once with
    probability 1 - alpha."""
    return math.ceil(math.log(alpha) / math.log(1 - share) - 1e-9)


def unseen_share(samples: int, alpha: float = RARE_ALPHA) -> float:
    """The largest share of windows a failure could hit and still be missed by `samples` samples with probability
    above alpha (1.0: with no sample, anything can hide)."""
    return 1.0 - alpha ** (1.0 / samples) if samples > 0 else 1.0


def resolution_words(samples: int, alpha: float = RARE_ALPHA) -> str:
    """"a failure on fewer than 1 in N traffic windows could go unseen", N rounded down (the cautious side)."""
    if samples <= 0:
        return "no sample was compared, so any failure could go unseen"
    one_in = max(1, math.floor(1.0 / unseen_share(samples, alpha)))
    level = f"{100 * (1 - alpha):g} %"
    noun = "sample" if samples == 1 else "samples"
    if one_in <= 1:
        return f"on {samples} compared {noun} a failure on most traffic windows could go unseen (at {level})"
    return f"on {samples} compared {noun} a failure on fewer than 1 in {one_in} traffic windows could go unseen (at {level})"
