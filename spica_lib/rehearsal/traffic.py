"""The traffic of a rehearsal: a bounded sample of the trial's own traffic, as Mooncake records and as prompts.

The live system and the replay it is compared with get the same requests: the sample is written as a
Mooncake trace (arrival time, input and output length, KV block ids), replayed offline from that file and
sent to the live frontend from the same records. What the sample is:

- a trace: its first `limit` records of the part the search replayed, arrivals sped up as the trial's;
- a synthetic open loop: `limit` Poisson arrivals at its rate, drawn with its `arrival_seed`, each request of
  its ISL and OSL, the first `shared_prefix_ratio` of a prompt shared within one of `num_prefix_groups` groups;
- a closed loop: the same requests, all there at once, at most its in-flight cap being served (the replay's
  `replay_concurrency`, the live client's cap).

A prompt is built from the record's block ids: block h's words are a function of h alone, so two requests
that share blocks in the trace share the same words, and so the same KV blocks, live.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
from pydantic import BaseModel, ConfigDict

from spica_lib.base.artifacts import atomic_write_text
from spica_lib.config.workload import Workload
from spica_lib.replay.request import TRACE_BLOCK_SIZE, ReplayRequest

DEFAULT_REQUESTS = 240  # the default sweep's own replay size: well under a minute of live traffic at its rate


class TrafficRequest(BaseModel):
    """One request of the rehearsal's sample."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    arrival_ms: float
    input_tokens: int
    output_tokens: int
    hash_ids: tuple[int, ...]


class RehearsalTraffic(BaseModel):
    """The sample and how it is sent: by arrival time, or all at once under an in-flight cap."""

    model_config = ConfigDict(extra="forbid")

    requests: list[TrafficRequest]
    in_flight_cap: int | None = None  # a closed loop's cap (None: open loop, sent at the arrival times)
    source: str  # what the sample was drawn from, in words


def rehearsal_traffic(request: ReplayRequest, limit: int = DEFAULT_REQUESTS) -> RehearsalTraffic:
    """The first `limit` requests of the traffic the trial replayed (see the module docstring)."""
    workload = request.workload
    if workload.turns_per_session > 1:
        raise ValueError(
            f"a rehearsal sends single-turn requests; this workload has {workload.turns_per_session} turns per "
            "session (the multi-turn timing is the replay's own)"
        )
    if workload.is_trace_based:
        return _from_trace(workload, limit)
    cap = workload.effective_in_flight_cap(request.concurrency)
    count = min(limit, workload.resolved_request_count(request.concurrency))
    seed = 0 if workload.arrival_seed is None else workload.arrival_seed
    rng = np.random.default_rng([seed, 55])
    if cap is None:
        arrivals = np.cumsum(rng.exponential(1000.0 / float(workload.request_rate), size=count))
        arrivals -= arrivals[0]
    else:
        arrivals = np.zeros(count)
    blocks = math.ceil(workload.isl / TRACE_BLOCK_SIZE)
    shared = int(workload.isl * float(workload.shared_prefix_ratio)) // TRACE_BLOCK_SIZE
    groups = max(1, workload.num_prefix_groups)
    requests = []
    for index, at in enumerate(arrivals):
        group = int(rng.integers(0, groups))
        ids = [group * blocks + b for b in range(shared)]  # the group's shared blocks ...
        ids += [(groups + index) * blocks + b for b in range(shared, blocks)]  # ... then this request's own
        requests.append(TrafficRequest(arrival_ms=float(at), input_tokens=workload.isl, output_tokens=workload.osl,
                                       hash_ids=tuple(ids)))  # fmt: skip
    loop = (
        f"closed loop of {cap} in flight" if cap is not None else f"Poisson arrivals at {workload.request_rate:g} req/s"
    )
    return RehearsalTraffic(requests=requests, in_flight_cap=cap,
                            source=f"{count} synthetic requests (ISL {workload.isl}, OSL {workload.osl}, {loop})")  # fmt: skip


def _from_trace(workload: Workload, limit: int) -> RehearsalTraffic:
    path = workload.search_part().trace_path
    records = []
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            if line.strip():
                records.append(json.loads(line))
            if len(records) >= limit:
                break
    first = float(records[0]["timestamp"])
    speedup = float(workload.arrival_speedup_ratio)
    requests = [
        TrafficRequest(arrival_ms=(float(r["timestamp"]) - first) / speedup, input_tokens=int(r["input_length"]),
                       output_tokens=int(r["output_length"]), hash_ids=tuple(r.get("hash_ids") or []))
        for r in records
    ]  # fmt: skip
    cap = workload.replay_concurrency
    return RehearsalTraffic(
        requests=requests, in_flight_cap=cap, source=f"the first {len(requests)} requests of {path}"
    )


def closed_loop(traffic: RehearsalTraffic, in_flight: int) -> RehearsalTraffic:
    """The same requests all there at once, at most `in_flight` of them being served (the rehearsal's closed-loop
    step: its throughput is the deployment's, where an open loop's is its arrival rate's), on prompts of their own."""
    # Block ids moved past any the open loop sent: the same sharing within the sample, no prefix it left cached.
    offset = 1 + max((h for r in traffic.requests for h in r.hash_ids), default=0)
    requests = [r.model_copy(update={"arrival_ms": 0.0, "hash_ids": tuple(h + offset for h in r.hash_ids)})
                for r in traffic.requests]  # fmt: skip
    return RehearsalTraffic(requests=requests, in_flight_cap=in_flight,
                            source=f"the same {len(requests)} requests in a closed loop of {in_flight} in flight")  # fmt: skip


def write_trace(traffic: RehearsalTraffic, path: str | Path) -> Path:
    """The sample as a Mooncake trace (what the offline replay of the rehearsal reads)."""
    lines = [
        json.dumps({"timestamp": round(r.arrival_ms, 3), "input_length": r.input_tokens,
                    "output_length": r.output_tokens, "hash_ids": list(r.hash_ids)})
        for r in traffic.requests
    ]  # fmt: skip
    atomic_write_text(Path(path), "\n".join(lines) + "\n")
    return Path(path)


def prompt(request: TrafficRequest, words: int) -> str:
    """The request's prompt: `input_tokens` words, block by block, each block's words set by its id alone."""
    out: list[str] = []
    ids = list(request.hash_ids) or [0]
    for position in range(request.input_tokens):
        block, offset = divmod(position, TRACE_BLOCK_SIZE)
        h = ids[block] if block < len(ids) else ids[-1] * 1_000_003 + block
        out.append(f"w{(h * 1_000_003 + offset * 7_919) % words}")
    return " ".join(out)
