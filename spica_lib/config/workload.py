"""`workload`: the traffic every candidate is replayed against.

Four shapes of load: a Mooncake trace replayed open loop (optionally sped up), the same trace
replayed closed loop (`replay_concurrency`), and a synthetic workload driven either by a request
rate (open loop), a fixed concurrency (closed loop) or a `kv_load_ratio` (closed loop with a
concurrency derived from each candidate's own KV capacity).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, StrictFloat, StrictInt, ValidationInfo, field_validator, model_serializer, model_validator

from spica_lib.base.since import without_defaults
from spica_lib.config.strict import StrictModel, several_problems
from spica_lib.traces.scan import TraceFormatError, check_split, scan_trace, split_trace
from spica_lib.traces.resample import resample_trace

Number = StrictInt | StrictFloat
SYNTHETIC_ONLY = ("isl", "osl", "request_rate", "concurrency", "kv_load_ratio", "num_request_ratio", "arrival_seed")
# The Poisson arrival sample an open-loop synthetic workload is searched on when none is named. It is not
# the sweep seed: changing the search's seed must not change the traffic it is scored on.
DEFAULT_ARRIVAL_SEED = 42
SPLIT_MARK = "split:"  # a search part's `holdout` naming the held-out file of its split (not a user's value)
FRESH_SEED_STRIDE = 7919  # fresh sample i of a search on seed s is drawn with s + stride * (i + 1)
LOAD_DRIVERS = ("request_rate", "concurrency", "kv_load_ratio")
# Shapes of synthetic traffic only (a trace's prompts, sessions and timing are its own), and the trace's own
# speed-up: each is refused where it would change nothing. Compared with the defaults, so a dump reads back.
SYNTHETIC_SHAPE = ("shared_prefix_ratio", "num_prefix_groups", "turns_per_session", "inter_turn_delay_ms")
TRACE_ONLY = ("arrival_speedup_ratio",)


class Workload(StrictModel):
    """The traffic model. `trace_path` set means a trace workload; otherwise synthetic."""

    isl: StrictInt | None = None
    osl: StrictInt | None = None
    concurrency: StrictInt | None = None
    kv_load_ratio: Number | list[Number] | None = None
    request_rate: Number | None = None
    num_request_ratio: Number | None = None
    shared_prefix_ratio: Number = Field(default=0.0, ge=0, le=1)
    num_prefix_groups: StrictInt = Field(default=0, ge=0)
    turns_per_session: StrictInt = Field(default=1, ge=1)
    inter_turn_delay_ms: Number = Field(default=0.0, ge=0)
    trace_path: str | None = None
    trace_format: Literal["mooncake"] = "mooncake"
    arrival_speedup_ratio: Number = Field(default=1.0, gt=0)
    replay_concurrency: StrictInt | None = None
    # Open-loop synthetic workloads (request_rate): which Poisson arrival sample every candidate of the
    # search is replayed on (one sample for all: their differences carry less noise than their levels).
    # Filled in with DEFAULT_ARRIVAL_SEED when left out; a closed loop or a trace has no arrival draw.
    arrival_seed: StrictInt | None = Field(default=None, ge=0)
    # Trace workloads: traffic the search never replays, for the finish to check the answer on. A fraction
    # (0 < f < 1) holds out the last f of the trace's time span; a path names a second trace file.
    holdout: Number | str | None = None
    # Written by Spica from `sweep.search_sample` (config/root.py): the requests of the trace the search replays (a
    # stratified sample, traces/sample.py; None: the whole trace or its search part) and the sample's seed;
    # and, on the search's own part, the trace it was drawn from (the finish resamples that one, at full size).
    search_requests: StrictInt | None = Field(default=None, ge=1)
    search_seed: StrictInt | None = Field(default=None, ge=0)
    sampled_from: str | None = None

    @model_serializer(mode="wrap")
    def _without_unset_sampling(self, handler: Any) -> dict[str, Any]:
        # A workload searched whole keeps the run id and trial keys of before sampling.
        return without_defaults(handler(self), self, search_requests=None, search_seed=None, sampled_from=None)

    @field_validator("concurrency", mode="before")
    @classmethod
    def _whole_concurrency(cls, value: Any) -> Any:
        # YAML `4.0` is a whole number: accept it as 4; 1.9 is not and is rejected by the int type.
        if isinstance(value, float) and value.is_integer():
            return int(value)
        return value

    @field_validator("trace_path", mode="after")
    @classmethod
    def _trace_exists_and_parses(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is None:
            return None
        base = Path((info.context or {}).get("base_dir", "."))
        path = Path(value).expanduser()
        resolved = (path if path.is_absolute() else base / path).resolve()
        if not resolved.is_file():
            raise ValueError(
                f"trace file {value!r} does not exist (looked for {resolved}); "
                "a relative trace_path is read relative to the config file's folder"
            )
        try:
            scan_trace(resolved)
        except TraceFormatError as exc:
            raise ValueError(f"{resolved} is not a Mooncake JSONL trace: {exc}") from None
        return str(resolved)

    @field_validator("holdout", mode="after")
    @classmethod
    def _holdout_is_a_share_or_a_trace(cls, value: float | str | None, info: ValidationInfo) -> float | str | None:
        if value is None or isinstance(value, str) and value.startswith(SPLIT_MARK):
            return value
        if not isinstance(value, str):
            if not 0 < value < 1:
                raise ValueError(f"a holdout fraction is the share of the trace's time span held out, in (0, 1); got {value}")
            return value
        return cls._trace_exists_and_parses(value, info)

    @property
    def is_trace_based(self) -> bool:
        return self.trace_path is not None

    @property
    def is_synthetic(self) -> bool:
        return self.trace_path is None

    @property
    def kv_load_ratio_range(self) -> tuple[float, float] | None:
        if isinstance(self.kv_load_ratio, list):
            low, high = self.kv_load_ratio
            return float(low), float(high)
        return None

    def effective_in_flight_cap(self, override: int | None = None) -> int | None:
        """Closed-loop cap on in-flight requests, or None for open loop."""
        if self.is_trace_based:
            return self.replay_concurrency
        if override is not None:
            return override
        return self.concurrency

    def expected_requests(self) -> int | None:
        """Requests per replay, when the workload alone decides it (not for a kv_load_ratio workload)."""
        if self.is_trace_based and self.search_requests is not None and self.sampled_from is None:
            return self.search_requests  # the search replays its sample (about this many requests)
        if self.is_trace_based:
            if isinstance(self.holdout, int | float):  # counted, not written: validation writes nothing
                return check_split(self.trace_path, float(self.holdout))[0]
            return scan_trace(self.trace_path).records
        if self.kv_load_ratio is not None:
            return None
        return self.resolved_request_count()

    def resolved_request_count(self, override: int | None = None) -> int:
        """Requests in a synthetic replay: `num_request_ratio` times the load driver, at least 1."""
        load: float | None = override if override is not None else (self.concurrency or self.request_rate)
        if load is None:
            raise ValueError("a kv_load_ratio workload needs the candidate's concurrency to size its request count")
        return max(1, round((self.num_request_ratio or 0.0) * load))

    @property
    def draws_arrivals(self) -> bool:
        """Whether the replay draws this workload's arrival times at random (open-loop synthetic traffic)."""
        return self.is_synthetic and self.request_rate is not None

    def search_part(self) -> Workload:
        """The traffic the search replays: the trace without its held-out part (the workload itself without one).

        A fractional holdout is cut off the trace into two files (traces/scan.py: split_trace); the
        search part then names the held-out file in `holdout`, marked as a split, for the finish.
        """
        part = self
        if isinstance(self.holdout, int | float) and not isinstance(self.holdout, bool):
            split = split_trace(self.trace_path, float(self.holdout))
            part = self.model_copy(update={"trace_path": split.search, "holdout": SPLIT_MARK + split.holdout})
        if self.search_requests is not None and self.sampled_from is None:
            from spica_lib.traces.sample import sample_trace

            sample = sample_trace(part.trace_path, self.search_requests, self.search_seed or 0)
            part = part.model_copy(update={"trace_path": sample, "sampled_from": part.trace_path})
        return part

    @property
    def whole(self) -> Workload:
        """The traffic the search's sample stands for (itself when the search replays the whole trace)."""
        if self.sampled_from is None:
            return self
        return self.model_copy(update={"trace_path": self.sampled_from, "sampled_from": None, "search_requests": None,
                                       "search_seed": None})  # fmt: skip

    def holdout_part(self) -> Workload | None:
        """The held-out traffic as a workload of its own, or None without a holdout."""
        if self.holdout is None:
            return None
        if not isinstance(self.holdout, str):
            return self.search_part().holdout_part()
        return self.model_copy(update={"trace_path": self.holdout.removeprefix(SPLIT_MARK), "holdout": None,
                                       "sampled_from": None, "search_requests": None, "search_seed": None})  # fmt: skip

    def fresh_sample(self, index: int) -> Workload:
        """The same traffic on its `index`-th fresh sample, the same for every deployment: a Poisson arrival
        draw the search never replays (every fresh seed is above the search's), or a block-bootstrap
        resample of a trace without a held-out part (traces/resample.py); otherwise the traffic itself."""
        if self.draws_arrivals:
            return self.model_copy(update={"arrival_seed": self.arrival_seed + FRESH_SEED_STRIDE * (index + 1)})
        if self.is_trace_based and self.holdout is None:
            whole = self.whole  # a sampled search is checked on resamples of the whole trace
            return whole.model_copy(update={"trace_path": resample_trace(whole.trace_path, index)})
        return self

    @property
    def resamples(self) -> bool:
        """Whether its fresh samples are resamples of a trace (a trace without a held-out part)."""
        return self.is_trace_based and self.holdout is None

    @property
    def synthetic_arrival_interval_ms(self) -> float:
        return 1000.0 / self.request_rate if self.request_rate else 1.0

    @model_validator(mode="after")
    def _consistent_load_shape(self) -> Workload:
        # Every problem of the shape at once, each at its field (the README promises them all in one pass).
        found = self._trace_shape_problems() if self.is_trace_based else self._synthetic_shape_problems()
        if found:
            raise several_problems(type(self).__name__, [(name, message, getattr(self, name, None) if name else None)
                                                         for name, message in found])  # fmt: skip
        if self.draws_arrivals and self.arrival_seed is None:
            self.arrival_seed = DEFAULT_ARRIVAL_SEED
        return self

    def _trace_shape_problems(self) -> list[tuple[str, str]]:
        """(field, message) for each setting a trace workload cannot take ("" for the workload as a whole)."""
        stray = [name for name in SYNTHETIC_ONLY if getattr(self, name) is not None]
        stray += [name for name in SYNTHETIC_SHAPE if getattr(self, name) != Workload.model_fields[name].default]
        found = [(name, f"{getattr(self, name)!r}: a trace workload (trace_path set) takes its lengths, prefixes, "
                  "sessions and timing from the trace, so it would change nothing: remove it")
                 for name in stray]  # fmt: skip
        if self.replay_concurrency is not None and self.replay_concurrency <= 0:
            found.append(("replay_concurrency", f"must be a positive integer, got {self.replay_concurrency}"))
        if isinstance(self.holdout, int | float):
            try:
                check_split(self.trace_path, float(self.holdout))
            except TraceFormatError as exc:
                found.append(("holdout", f"{self.holdout}: {exc}"))
        return found

    def _synthetic_shape_problems(self) -> list[tuple[str, str]]:
        """(field, message) for each problem of a synthetic workload ("" for the workload as a whole)."""
        found: list[tuple[str, str]] = []
        if self.holdout is not None:
            found.append(("holdout", "holdout keeps part of a trace from the search; a synthetic workload's finish "
                          "already replays fresh arrival samples the search never saw (sweep.finish_samples): "
                          "remove it"))  # fmt: skip
        for name in TRACE_ONLY:
            if getattr(self, name) != Workload.model_fields[name].default:
                found.append((name, "speeds up a trace's own arrival times; a synthetic workload's load is its "
                              "request_rate or concurrency, so it would change nothing: remove it (raise "
                              "request_rate instead)"))  # fmt: skip
        drivers = [name for name in LOAD_DRIVERS if getattr(self, name) is not None]
        if len(drivers) != 1:
            found.append(("", "a synthetic workload needs exactly one of request_rate, concurrency or kv_load_ratio "
                          f"(got {drivers or 'none'}); or set trace_path to replay a trace"))  # fmt: skip
        found += [(name, "required by a synthetic workload (or set trace_path to replay a trace)")
                  for name in ("isl", "osl", "num_request_ratio") if getattr(self, name) is None]  # fmt: skip
        if self.replay_concurrency is not None:
            found.append(("replay_concurrency", "is for trace workloads; use concurrency for a synthetic closed loop"))
        if self.concurrency is not None and self.concurrency <= 0:
            found.append(("concurrency", f"must be a positive integer, got {self.concurrency}"))
        for name in ("isl", "osl", "request_rate", "num_request_ratio"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                found.append((name, f"must be positive, got {value}"))
        if self.kv_load_ratio is not None:
            found += [("kv_load_ratio", problem) for problem in _kv_load_ratio_problems(self.kv_load_ratio)]
        if not self.draws_arrivals and self.arrival_seed is not None and len(drivers) == 1:
            found.append(("arrival_seed", "picks a Poisson arrival sample of a request_rate workload; a closed loop "
                          f"({drivers[0]}) sends the next request when one finishes, so it has no arrival draw: "
                          "remove it"))  # fmt: skip
        return found


def _kv_load_ratio_problems(ratio: float | list[float]) -> list[str]:
    values = ratio if isinstance(ratio, list) else [ratio]
    if isinstance(ratio, list) and len(ratio) != 2:
        return [f"a kv_load_ratio range is exactly [min, max], got {ratio}"]
    if any(not math.isfinite(v) or v < 0 for v in values):
        return [f"kv_load_ratio values must be finite and >= 0 (above 1 oversubscribes), got {ratio}"]
    if isinstance(ratio, list) and ratio[0] >= ratio[1]:
        return [f"a kv_load_ratio range needs min < max, got {ratio}"]
    return []


class NamedWorkload(Workload):
    """One of several workloads every candidate must serve (`workload` written as a list)."""

    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$", max_length=64)
    weight: Number | None = Field(default=None, gt=0)  # only with goal.workload_score: weighted_mean

    def traffic(self) -> Workload:
        """The workload itself, without its name and weight."""
        return Workload.model_construct(**{name: getattr(self, name) for name in Workload.model_fields})
