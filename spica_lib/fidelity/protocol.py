"""How a measured row is replayed: the engine settings and the client the measurement is believed to have used.

silicon_sample.csv records each row's shape, ISL/OSL and concurrency but not its engine settings.
The one that moves TTFT is vLLM's chunked-prefill budget, `max_num_batched_tokens`: with 8192 (the
search's first value) the `c` prompts of a closed loop's opening wave are prefilled in one step,
their decodes stay in step, and every later wave repeats it; with 2048 each step takes two 1k
prompts next to the running decodes, and the loop drifts out of step as a measured client does.
`bench/fidelity.py` replays every row both ways and prints which agrees with the silicon; the
default is the one that does (docs/fidelity.md, "TTFT and the replay protocol").
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class ReplayProtocol(BaseModel):
    """The engine settings a row is replayed with, and why."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    max_num_batched_tokens: int
    why: str


MEASURED = ReplayProtocol(
    name="measured",
    max_num_batched_tokens=2048,
    why="the chunked-prefill budget that reproduces the rows' TTFT (the rows do not record theirs)",
)
SEARCH_DEFAULT = ReplayProtocol(
    name="search-default",
    max_num_batched_tokens=8192,
    why="the search's first agg_max_num_batched_tokens (how every row was replayed before the protocol study)",
)
PROTOCOLS = {p.name: p for p in (MEASURED, SEARCH_DEFAULT)}
