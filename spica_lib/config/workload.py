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

from pydantic import Field, StrictFloat, StrictInt, ValidationInfo, field_validator, model_validator

from spica_lib.config.strict import StrictModel
from spica_lib.config.trace import TraceFormatError, scan_trace

Number = StrictInt | StrictFloat
SYNTHETIC_ONLY = ("isl", "osl", "request_rate", "concurrency", "kv_load_ratio", "num_request_ratio")
LOAD_DRIVERS = ("request_rate", "concurrency", "kv_load_ratio")


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
        if self.is_trace_based:
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
    def synthetic_arrival_interval_ms(self) -> float:
        return 1000.0 / self.request_rate if self.request_rate else 1.0

    @model_validator(mode="after")
    def _consistent_load_shape(self) -> Workload:
        if self.is_trace_based:
            self._check_trace_shape()
        else:
            self._check_synthetic_shape()
        return self

    def _check_trace_shape(self) -> None:
        stray = [name for name in SYNTHETIC_ONLY if getattr(self, name) is not None]
        if stray:
            raise ValueError(
                f"a trace workload (trace_path set) takes its lengths and timing from the trace; remove {stray}"
            )
        if self.replay_concurrency is not None and self.replay_concurrency <= 0:
            raise ValueError(f"replay_concurrency must be a positive integer, got {self.replay_concurrency}")

    def _check_synthetic_shape(self) -> None:
        drivers = [name for name in LOAD_DRIVERS if getattr(self, name) is not None]
        if len(drivers) != 1:
            raise ValueError(
                "a synthetic workload needs exactly one of request_rate, concurrency or kv_load_ratio "
                f"(got {drivers or 'none'}); or set trace_path to replay a trace"
            )
        missing = [name for name in ("isl", "osl", "num_request_ratio") if getattr(self, name) is None]
        if missing:
            raise ValueError(f"a synthetic workload requires {missing}")
        if self.replay_concurrency is not None:
            raise ValueError("replay_concurrency is for trace workloads; use concurrency for a synthetic closed loop")
        if self.concurrency is not None and self.concurrency <= 0:
            raise ValueError(f"concurrency must be a positive integer, got {self.concurrency}")
        for name in ("request_rate", "isl", "osl", "num_request_ratio"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ValueError(f"{name} must be positive, got {value}")
        if self.kv_load_ratio is not None:
            _check_kv_load_ratio(self.kv_load_ratio)


def _check_kv_load_ratio(ratio: float | list[float]) -> None:
    values = ratio if isinstance(ratio, list) else [ratio]
    if isinstance(ratio, list) and len(ratio) != 2:
        raise ValueError(f"a kv_load_ratio range is exactly [min, max], got {ratio}")
    if any(not math.isfinite(v) or v < 0 for v in values):
        raise ValueError(f"kv_load_ratio values must be finite and >= 0 (above 1 oversubscribes), got {ratio}")
    if isinstance(ratio, list) and ratio[0] >= ratio[1]:
        raise ValueError(f"a kv_load_ratio range needs min < max, got {ratio}")


class NamedWorkload(Workload):
    """One of several workloads every candidate must serve (`workload` written as a list)."""

    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$", max_length=64)
    weight: Number | None = Field(default=None, gt=0)  # only with goal.workload_score: weighted_mean

    def traffic(self) -> Workload:
        """The workload itself, without its name and weight."""
        return Workload.model_construct(**{name: getattr(self, name) for name in Workload.model_fields})
