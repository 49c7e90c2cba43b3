"""Where a replayed row's TTFT goes: waiting to be admitted, and from admission to the first token.

The replay's per-request records carry each request's arrival, its first admission by the engine's scheduler
and its first token. A request's TTFT is (first admit - arrival), the queue wait: the scheduler had no room for
it (sequences, tokens per step, KV blocks); plus (first token - first admit), its prefill chunks and the steps
they share with the running decodes. The row's mean TTFT is the sum of the two means.

A measured row carries its mean TTFT only, so which of the two parts silicon differs on is not observed row by
row. Across rows at different loads it can be estimated: `ttft_regression` fits measured TTFT = a x queue +
b x admit-to-first-token + c over a group's rows (relative least squares), a regression over the rows, not a
measurement of the parts; a and b near 1 say the replay's parts are right, b > 1 that silicon's prefill and the
steps it shares are slower, a < 1 that the replay queues where silicon did not.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from pathlib import Path

import numpy as np
from pydantic import BaseModel, ConfigDict

from spica_lib.fidelity.silicon import SiliconRow

PARTS_COLUMNS = ["arrival_time_ms", "first_admit_ms", "first_token_ms", "ttft_ms"]
BOOTSTRAP = 400  # resamples of a group's rows for the coefficients' intervals
BOOTSTRAP_SEED = 71


class TtftParts(BaseModel):
    """A replayed row's mean TTFT in two parts (ms): queue wait and admit-to-first-token, over every request and
    over the requests after the opening wave (the loop's first `concurrency`, all sent at time 0)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    queue_ms: float
    admit_to_token_ms: float
    after_wave_queue_ms: float | None = None
    after_wave_admit_to_token_ms: float | None = None

    @property
    def ttft_ms(self) -> float:
        return self.queue_ms + self.admit_to_token_ms


def ttft_parts(requests: Path, concurrency: int) -> tuple[TtftParts, float | None] | None:
    """The parts of the mean TTFT from a replay's per-request records, and the mean TTFT after the opening wave;
    None without records. Requests that never produced a token (none, in a completed closed loop) are left out."""
    import pandas as pd

    if not requests.exists():
        return None
    frame = pd.read_parquet(requests, columns=PARTS_COLUMNS).sort_values("arrival_time_ms", kind="stable")
    frame = frame.dropna(subset=["first_admit_ms", "first_token_ms"])
    if frame.empty:
        return None
    queue = frame["first_admit_ms"] - frame["arrival_time_ms"]
    admit = frame["first_token_ms"] - frame["first_admit_ms"]
    later = slice(concurrency, None)
    after = len(frame) > concurrency
    parts = TtftParts(
        queue_ms=float(queue.mean()),
        admit_to_token_ms=float(admit.mean()),
        after_wave_queue_ms=float(queue.iloc[later].mean()) if after else None,
        after_wave_admit_to_token_ms=float(admit.iloc[later].mean()) if after else None,
    )
    return parts, float(frame["ttft_ms"].iloc[later].mean()) if after else None


class PartsRegression(BaseModel):
    """measured TTFT ~ queue x `queue` + admit-to-first-token x `admit` + `cost_ms` over one group's rows, with
    each coefficient's 90 % bootstrap interval over the rows, and the fit's MAPE on the rows it was fitted on."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    rows: int
    queue: float
    admit: float
    cost_ms: float
    queue_interval: tuple[float, float]
    admit_interval: tuple[float, float]
    cost_interval: tuple[float, float]
    fit_mape: float  # percent
    queue_share: float  # the replay's mean share of TTFT spent queueing over these rows, percent


def parts_fit(pairs: list[tuple[TtftParts, float]]) -> tuple[float, float, float]:
    """(queue coefficient, admit coefficient, cost ms) minimising the relative squared error of measured TTFT, each at
    least 0 (a part that cannot be negative); a part the rows never exercise (all zero) keeps coefficient 1."""
    queue = np.array([p.queue_ms for p, _ in pairs])
    admit = np.array([p.admit_to_token_ms for p, _ in pairs])
    measured = np.array([m for _, m in pairs])
    weight = 1.0 / measured
    columns = [queue * weight, admit * weight, weight]
    used = [bool(np.any(queue > 0)), True, True]
    return _nonnegative_lstsq(columns, used, np.ones_like(measured))


def _nonnegative_lstsq(columns: list[np.ndarray], used: list[bool], target: np.ndarray) -> tuple[float, float, float]:
    """Least squares over the used columns with every coefficient >= 0: the unconstrained fit, else the best of the
    fits that drop each negative coefficient in turn (three columns: an exhaustive active set)."""
    best: tuple[float, tuple[float, ...]] | None = None
    indices = [i for i, u in enumerate(used) if u]
    for mask in range(1 << len(indices)):
        keep = [i for bit, i in enumerate(indices) if mask >> bit & 1]
        if not keep:
            continue
        design = np.column_stack([columns[i] for i in keep])
        solved, *_ = np.linalg.lstsq(design, target, rcond=None)
        if np.any(solved < 0):
            continue
        coefficients = [0.0, 0.0, 0.0]
        for i, value in zip(keep, solved, strict=True):
            coefficients[i] = float(value)
        residual = float(np.sum((design @ solved - target) ** 2))
        if best is None or residual < best[0]:
            best = (residual, tuple(coefficients))
    assert best is not None
    queue, admit, cost = best[1]
    if not used[0]:
        queue = 1.0
    return queue, admit, cost


def predicted_ttft(parts: TtftParts, coefficients: tuple[float, float, float]) -> float:
    queue, admit, cost = coefficients
    return queue * parts.queue_ms + admit * parts.admit_to_token_ms + cost


def ttft_regression(pairs: list[tuple[TtftParts, float]]) -> PartsRegression:
    """The regression of measured TTFT on the replay's parts over one group's rows (see the module's docstring)."""
    fitted = parts_fit(pairs)
    rng = np.random.default_rng(BOOTSTRAP_SEED)
    draws = []
    for _ in range(BOOTSTRAP):
        sample = [pairs[i] for i in rng.integers(0, len(pairs), len(pairs))]
        draws.append(parts_fit(sample))
    low, high = np.percentile(np.array(draws), [5, 95], axis=0)
    mape = 100 * statistics.fmean(abs(predicted_ttft(p, fitted) / m - 1) for p, m in pairs)
    share = 100 * statistics.fmean(p.queue_ms / p.ttft_ms for p, _ in pairs if p.ttft_ms > 0)
    return PartsRegression(rows=len(pairs), queue=fitted[0], admit=fitted[1], cost_ms=fitted[2],
                           queue_interval=(float(low[0]), float(high[0])), admit_interval=(float(low[1]), float(high[1])),
                           cost_interval=(float(low[2]), float(high[2])), fit_mape=mape, queue_share=share)  # fmt: skip


def attribution_rows(rows: Iterable[tuple[SiliconRow, TtftParts, float]]) -> str:
    """One line per replayed row: its load, the measured TTFT, and the replayed TTFT with its two parts."""
    lines = ["| row | concurrency | ISL/OSL | measured TTFT ms | replayed TTFT ms | queue wait ms | admit to first token ms |",
             "|---|---:|---|---:|---:|---:|---:|"]  # fmt: skip
    for row, parts, measured in rows:
        lines.append(f"| {row.id} | {row.concurrency} | {row.isl}/{row.osl} | {measured:.0f} | {parts.ttft_ms:.0f} | "
                     f"{parts.queue_ms:.0f} | {parts.admit_to_token_ms:.0f} |")  # fmt: skip
    return "\n".join(lines)


def regression_table(groups: dict[tuple[str, str, str], list[tuple[TtftParts, float]]]) -> str:
    """Per group: the replay's queue share of TTFT and the regression of measured TTFT on the parts."""
    lines = ["| system | backend | model | rows | replay's queue share | queue x (90 % interval) | "
             "admit-to-first-token x (90 % interval) | + ms (90 % interval) | MAPE of the fit on its rows |",
             "|---|---|---|---:|---:|---|---|---|---:|"]  # fmt: skip
    for (system, backend, model), pairs in sorted(groups.items()):
        if len(pairs) < 3:
            continue  # three coefficients: fewer rows fit anything
        r = ttft_regression(pairs)
        lines.append(f"| {system} | {backend} | {model} | {r.rows} | {r.queue_share:.0f} % | {r.queue:.2f} "
                     f"({r.queue_interval[0]:.2f}–{r.queue_interval[1]:.2f}) | {r.admit:.2f} ({r.admit_interval[0]:.2f}–"
                     f"{r.admit_interval[1]:.2f}) | {r.cost_ms:.0f} ({r.cost_interval[0]:.0f}–{r.cost_interval[1]:.0f}) | "
                     f"{r.fit_mape:.0f} % |")  # fmt: skip
    return "\n".join(lines)
