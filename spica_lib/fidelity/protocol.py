"""How a measured row is replayed: the engine settings the measurement is believed to have used.

silicon_sample.csv records each row's shape, ISL/OSL and concurrency but not its engine settings.
The one that moves TTFT is vLLM's chunked-prefill budget, `max_num_batched_tokens`. With 8192 (the
search's first value) a closed loop of `c` 1k prompts is prefilled in one step, its decodes stay in
step, and every later wave repeats it: each request waits for the whole wave. A smaller budget
takes a few prompts per step next to the running decodes, and the loop drifts out of step.

Three protocols (`bench/fidelity.py` replays every row by each and prints which agrees with the
silicon; docs/fidelity.md, "TTFT and the replay protocol"):
- `aiconfigurator-benchmark`: the settings aiconfigurator's generator writes for a vLLM agg
  benchmark (its `rule_plugin/benchmark/vllm.rule`): max_num_seqs = the row's batch size and
  max_num_batched_tokens = batch size + ISL + 1500. The rows come from aiconfigurator's own
  measurement campaign, so this is the best guess at each row's own settings; the default.
- `chunk-2048`: a fixed 2048-token budget.
- `search-default`: the search's first agg_max_num_batched_tokens, 8192, as every row was replayed
  before this study.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

from spica_lib.fidelity.silicon import SiliconRow

MIN_MAX_NUM_SEQS = 256  # a fixed-budget protocol leaves the batch cap at the search's first value (or c)
AIC_BENCHMARK_HEADROOM = 1500  # tokens the generator's benchmark rule adds to batch size + ISL


class ReplayProtocol(BaseModel):
    """The engine settings a row is replayed with, and why."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    rule: Literal["fixed", "aiconfigurator_benchmark"]
    max_num_batched_tokens: int | None = None  # a fixed protocol's budget
    why: str

    def settings(self, row: SiliconRow) -> dict[str, int]:
        """max_num_batched_tokens and max_num_seqs for the row."""
        if self.rule == "aiconfigurator_benchmark":
            batch = row.concurrency
            return {"max_num_batched_tokens": batch + row.isl + AIC_BENCHMARK_HEADROOM, "max_num_seqs": batch}
        assert self.max_num_batched_tokens is not None
        return {"max_num_batched_tokens": self.max_num_batched_tokens,
                "max_num_seqs": max(MIN_MAX_NUM_SEQS, row.concurrency)}  # fmt: skip

    def describe(self) -> str:
        if self.rule == "aiconfigurator_benchmark":
            return (f"max_num_seqs = batch size, max_num_batched_tokens = batch size + ISL + "
                    f"{AIC_BENCHMARK_HEADROOM} ({self.why})")  # fmt: skip
        return f"max_num_batched_tokens {self.max_num_batched_tokens} ({self.why})"


AIC_BENCHMARK = ReplayProtocol(
    name="aiconfigurator-benchmark",
    rule="aiconfigurator_benchmark",
    why="what aiconfigurator's generator writes for a vLLM agg benchmark; the rows record no settings of their own",
)
CHUNK_2048 = ReplayProtocol(name="chunk-2048", rule="fixed", max_num_batched_tokens=2048,
                            why="a fixed chunked-prefill budget of 2048")  # fmt: skip
SEARCH_DEFAULT = ReplayProtocol(
    name="search-default",
    rule="fixed",
    max_num_batched_tokens=8192,
    why="the search's first agg_max_num_batched_tokens, as every row was replayed before the protocol study",
)
MEASURED = AIC_BENCHMARK  # the default: the protocol believed to be the measurement's
PROTOCOLS = {p.name: p for p in (AIC_BENCHMARK, CHUNK_2048, SEARCH_DEFAULT)}
