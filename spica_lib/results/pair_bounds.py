"""One-sided bounds on how far one finished deployment is from another, each at a stated level, from their samples.

The statistic is `goal.robustness`:

- **mean**: Student's t on the per-sample differences (the samples are paired: the same traffic for both).
- **p10**: distribution-free order-statistic bounds on each deployment's 10th percentile, combined
  (upper(b) - lower(a)). A percentile bootstrap cannot reach the tails these levels ask for
  ((alpha / 2) / ((K - 1) L) ~ 0.003) with 4-16 samples, and it claimed "equivalent" for a deployment truly
  beyond the margin 3-4 times as often as its nominal rate (bench/decision_errors.py). The order statistics
  hold at any sample size, and below the size they need (68-81 samples with 4 deployments, each quantile's
  bound at half the pair's level) they bound nothing: no claim is made, and the finish says so.
- **worst**: the worst of n samples has no population value a finite sample can bound without assuming the
  distribution's shape, so it bounds nothing: the finish recommends the best worst sample and claims nothing.

Two exact deployments (round robin on traffic that does not change) differ by a fact about that traffic: a
bound of one point, labelled "on this traffic" wherever it is shown. Fewer than 2 paired samples bound nothing.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

import numpy as np

from spica_lib.results.finish import FinishedDeployment
from spica_lib.trial.outcome import SAME_RELATIVE

BOOTSTRAP_DRAWS = 4000  # enough draws that P(best) and a standard error are stable to the second digit
BOOTSTRAP_SEED = 0
QUANTILE = {"p10": 0.10}  # the statistics that are a population quantile, and which
UNBOUNDED = (-math.inf, math.inf)


def statistic(scores: Sequence[float], robustness: str) -> float:
    return float(statistics_along(np.asarray(scores, dtype=float), robustness))


def statistics_along(values: np.ndarray, robustness: str) -> np.ndarray:
    """`goal.robustness` of the samples along the last axis (one value per row of resampled scores)."""
    if robustness == "worst":
        return values.min(axis=-1)
    if robustness == "p10":
        return np.percentile(values, 10, axis=-1)
    return values.mean(axis=-1)


def pair_bounds(a: FinishedDeployment, b: FinishedDeployment, robustness: str, alpha: float) -> tuple[float, float]:
    """One-sided bounds, each at level 1 - alpha, on stat(b) - stat(a), from the samples both were feasible on."""
    ours, theirs = paired(a, b)
    if a.exact and b.exact and len(ours):
        gap = statistic(theirs, robustness) - statistic(ours, robustness)
        gap = 0.0 if bool(np.all(_same(theirs, ours))) else gap
        return gap, gap  # two exact replays of the same traffic: their difference is a fact about it
    n = len(ours)
    if n < 2:
        return UNBOUNDED
    if robustness == "mean":
        # A difference within float noise (the simulator's summation order) is no difference: twins differ by 0.
        differences = np.where(_same(theirs, ours), 0.0, theirs - ours)
        sd = float(differences.std(ddof=1))
        half = _t_quantile(1 - alpha, n - 1) * sd / math.sqrt(n)
        centre = float(differences.mean())
        skew = _skew_widening(differences, sd, half)
        return centre - half + min(skew, 0.0), centre + half + max(skew, 0.0)
    if robustness in QUANTILE:
        # Each bound on stat(b) - stat(a) needs one bound on each quantile to hold: each at alpha / 2, so that
        # both hold together at 1 - alpha (Bonferroni).
        q = QUANTILE[robustness]
        low_b, high_b = quantile_bounds(theirs, q, alpha / 2)
        low_a, high_a = quantile_bounds(ours, q, alpha / 2)
        if bool(np.all(_same(theirs, ours))):
            low_b, high_b = low_a, high_a  # twins: the same order statistics, not two draws of them
        return low_b - high_a, high_b - low_a
    return UNBOUNDED


def _skew_widening(differences: np.ndarray, sd: float, half: float) -> float:
    """How far a skewed sample moves the t bounds (Johnson's modified t, 1978), applied only on the side it widens.

    Student's t assumes the mean and the spread of the differences vary independently. When one deployment collapses
    on a few samples, its differences are skewed: the samples that missed the collapse show both a small gap and a
    small spread, so the t bound on that side is too tight exactly when it is wrong (bench/decision_errors.py,
    "collapse"). Johnson's correction shifts the interval by the third moment, mu3 / (6 s^2 n) + mu3 / (3 s^4) x
    half^2; it is added where it widens a bound, never where it would narrow one, so it costs claims only on skewed
    samples."""
    if sd <= 0 or len(differences) < 3:
        return 0.0
    n = len(differences)
    third = float(np.mean((differences - differences.mean()) ** 3))
    return third / (6 * sd**2 * n) + third / (3 * sd**4) * half**2


def _same(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.abs(a - b) <= SAME_RELATIVE * np.maximum(np.abs(a), np.abs(b))


def quantile_bounds(values: np.ndarray, q: float, alpha: float) -> tuple[float, float]:
    """Distribution-free one-sided bounds on the q-quantile, each at level 1 - alpha: order statistics chosen by
    the binomial law of how many samples fall below the quantile (-inf / +inf where n samples cannot reach alpha)."""
    ordered = np.sort(values)
    n = len(ordered)
    below_count = _binomial_cdf(n, q)  # [r - 1] -> P(Bin(n, q) <= r - 1), for r = 1 .. n
    # Lower: the r-th smallest with P(Bin(n, q) >= r) >= 1 - alpha, the largest such r.
    below = np.flatnonzero(below_count <= alpha)
    low = float(ordered[below[-1]]) if below.size else -math.inf
    # Upper: the s-th smallest with P(Bin(n, q) <= s - 1) >= 1 - alpha, the smallest such s.
    above = np.flatnonzero(below_count >= 1 - alpha)
    high = float(ordered[above[0]]) if above.size else math.inf
    return low, high


# scipy's distribution calls cost far more than the bounds around them, and a finish asks the same few again and
# again (one level, a handful of sample counts): each is computed once per process.
@functools.cache
def _t_quantile(level: float, degrees: int) -> float:
    from scipy.stats import t

    return float(t.ppf(level, degrees))


@functools.cache
def _binomial_cdf(n: int, q: float) -> np.ndarray:
    from scipy.stats import binom

    table = binom.cdf(np.arange(n), n, q)
    table.flags.writeable = False  # shared between calls
    return table


def samples_for_a_claim(robustness: str, alpha: float) -> int | None:
    """The fewest paired samples with which a pair bound at level 1 - alpha can be finite (None: never)."""
    if robustness == "mean":
        return 2
    if robustness in QUANTILE:  # the lower bound of each quantile at alpha / 2 (pair_bounds) is the first finite
        return math.ceil(math.log(alpha / 2) / math.log(1 - QUANTILE[robustness]))
    return None


def paired(a: FinishedDeployment, b: FinishedDeployment) -> tuple[np.ndarray, np.ndarray]:
    """Scores of a and b on the samples both were feasible on, in sample order."""
    mine = {s.index: s.score for s in a.samples if s.status == "feasible" and s.score is not None}
    theirs = {s.index: s.score for s in b.samples if s.status == "feasible" and s.score is not None}
    both = sorted(set(mine) & set(theirs))
    return np.array([mine[i] for i in both], dtype=float), np.array([theirs[i] for i in both], dtype=float)


def standard_error(d: FinishedDeployment, robustness: str) -> float | None:
    """The bootstrap standard error of a deployment's statistic (0 when its samples are exact; None below 2)."""
    scores = np.asarray(d.scores, dtype=float)
    if d.exact:
        return 0.0
    if len(scores) < 2:
        return None
    return float(statistics_along(scores[draws(len(scores))], robustness).std())


@functools.cache
def draws(n: int) -> np.ndarray:
    """Bootstrap resampling indices for n samples (fixed seed: the same files give the same numbers)."""
    table = np.random.default_rng(BOOTSTRAP_SEED).integers(0, n, size=(BOOTSTRAP_DRAWS, n))
    table.flags.writeable = False  # shared between calls
    return table
