"""Stand-in replay durations, for benchmarks of our own control flow only (bench/slot_utilisation.py).

How well rounds keep their slots busy depends on how replay times spread, and a real replay of a
day of traffic takes minutes. With `SPICA_STAND_IN_DURATION="<p50>,<p90>"` (seconds) set, every
replay child, once its real replay of the (small) workload is done, sleeps until its wall time
reaches a duration drawn from the log-normal with that median and 90th percentile. The draw is
keyed by the replay call, so a trial takes the same time in every run. The trial is still scored
by its real replay: only how long it takes is a stand-in. Unset, nothing changes.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import time
from statistics import NormalDist
from typing import Any

STAND_IN_ENV = "SPICA_STAND_IN_DURATION"
Z_90 = NormalDist().inv_cdf(0.9)


def stand_in_seconds(call: dict[str, Any], setting: str | None = None) -> float | None:
    """The stand-in duration of this replay call, or None when no stand-in is set."""
    setting = os.environ.get(STAND_IN_ENV) if setting is None else setting
    if not setting:
        return None
    p50, p90 = _quantiles(setting)
    digest = hashlib.sha256(json.dumps(call, sort_keys=True, default=str).encode()).digest()
    uniform = (int.from_bytes(digest[:8], "big") + 0.5) / 2**64
    return p50 * math.exp(math.log(p90 / p50) / Z_90 * NormalDist().inv_cdf(uniform))


def wait_out_stand_in(call: dict[str, Any], started: float) -> None:
    """Sleep until `started` (a time.monotonic() reading) plus the call's stand-in duration, if one is set."""
    seconds = stand_in_seconds(call)
    if seconds is not None:
        time.sleep(max(0.0, started + seconds - time.monotonic()))


def _quantiles(setting: str) -> tuple[float, float]:
    try:
        p50, p90 = (float(part) for part in setting.split(","))
    except ValueError:
        raise ValueError(f"{STAND_IN_ENV}={setting!r}: expected '<p50>,<p90>' in seconds, e.g. '2.3,6.5'") from None
    if not 0 < p50 < p90:
        raise ValueError(f"{STAND_IN_ENV}={setting!r}: needs 0 < p50 < p90")
    return p50, p90
