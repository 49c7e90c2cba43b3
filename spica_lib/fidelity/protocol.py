"""How a measured row is replayed: the engine settings the measurement is believed to have used.

silicon_sample.csv records each row's shape, ISL/OSL and concurrency but not its engine settings.
The one that moves TTFT is vLLM's chunked-prefill budget, `max_num_batched_tokens`. With 8192 (the
search's first value) a closed loop of `c` 1k prompts is prefilled in one step, its decodes stay in
step, and every later wave repeats it: each request waits for the whole wave. A smaller budget
takes a few prompts per step next to the running decodes, and the loop drifts out of step.

Three protocols (`bench/fidelity.py` replays every row by each and prints which agrees with the
silicon; docs/fidelity/index.md, "TTFT and the replay protocol"):
- `aiconfigurator-benchmark`: the settings aiconfigurator's generator writes for a vLLM agg
  benchmark (its `rule_plugin/benchmark/vllm.rule`): max_num_seqs = the row's batch size and
  max_num_batched_tokens = batch size + ISL + 1500. The rows come from aiconfigurator's own
  measurement campaign, so this is the best guess at each row's own settings; the default.
- `chunk-2048`: a fixed 2048-token budget.
- `search-default`: the search's first agg_max_num_batched_tokens, 8192, as every row was replayed
  before this study.

A disaggregated row (SGLang or vLLM) is replayed by one protocol of its own, `disagg-measured`
(`disagg_settings`; docs/fidelity/ranking.md, "Disaggregated rows"), whichever agg protocol is chosen:
- prefill role: a chunked-prefill budget of max(8192, ISL) tokens (8192 is SGLang's default chunk and
  the search's first prefill value; raised so one prompt is prefilled in one step, as a disagg prefill
  server sized for the row's ISL does), and max_num_seqs = the row's prefill batch size where it records
  one, else as many whole prompts as the budget holds;
- decode role: max_num_seqs = the row's decode batch size where it records one, else the closed loop's
  share per decode worker (ceil(concurrency / workers): the measurement's decode engines admitted the
  whole loop, or its TPOT would say so), and max_num_batched_tokens = max(8192, max_num_seqs) (a decode
  step takes one token per request).
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
DISAGG_CHUNK = 8192  # SGLang's default chunked-prefill size, and the search's first prefill_max_num_batched_tokens
DISAGG_PROTOCOL = "disagg-measured"


def disagg_settings(row: SiliconRow) -> dict[str, int]:
    """prefill_/decode_ max_num_batched_tokens and max_num_seqs for a disagg row (see the module's docstring)."""
    assert row.prefill is not None and row.decode is not None
    prefill_budget = max(DISAGG_CHUNK, row.isl)
    prefill_seqs = row.prefill.batch_size or max(1, prefill_budget // row.isl)
    decode_seqs = row.decode.batch_size or -(-row.concurrency // row.decode.workers)
    return {
        "prefill_max_num_batched_tokens": prefill_budget,
        "prefill_max_num_seqs": prefill_seqs,
        "decode_max_num_batched_tokens": max(DISAGG_CHUNK, decode_seqs),
        "decode_max_num_seqs": decode_seqs,
    }


DISAGG_DESCRIPTION = (
    "prefill: budget max(8192, ISL), max_num_seqs = the row's prefill batch size or the prompts the budget holds; "
    "decode: max_num_seqs = the row's decode batch size or ceil(concurrency / decode workers)"
)


MEASURED = AIC_BENCHMARK  # the default: the protocol believed to be the measurement's
PROTOCOLS = {p.name: p for p in (AIC_BENCHMARK, CHUNK_2048, SEARCH_DEFAULT)}
