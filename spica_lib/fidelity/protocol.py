"""How a measured row is replayed: the engine's scheduling limits the measurement is believed to have used.

silicon_sample.csv records each row's shape, ISL/OSL and concurrency but not its engine settings. What
moves TTFT is the scheduler: how many tokens one step may carry (vLLM's `max_num_batched_tokens`,
TRT-LLM's `max_num_tokens`, SGLang's `chunked_prefill_size` and `max_prefill_tokens`), whether a prompt
longer than that is chunked, and how many sequences run at once. With 8192 tokens per step a closed loop
of `c` 1k prompts is prefilled in one step, its decodes stay in step, and every later wave repeats it:
each request waits for the whole wave. A smaller budget takes a few prompts per step next to the
running decodes, and the loop drifts out of step.

Each engine reads its own settings in the pinned mocker (ai-dynamo 1.5.1), and a setting an engine does
not read is not set (tests/test_fidelity_scheduler.py replays each one and shows it moves the replay):
- vLLM: `max_num_batched_tokens`, `max_num_seqs`; chunked prefill is always on (vLLM V1, the mocker's default).
- TRT-LLM: `max_num_batched_tokens` (its `max_num_tokens`), `max_num_seqs` (its `max_batch_size`) and
  `enable_chunked_prefill`. Its capacity scheduler policy is the mocker's only one, `guaranteed_no_evict`,
  which is TRT-LLM's documented default: setting it changes nothing, so it is not set.
- SGLang: `max_num_seqs` (its `max_running_requests`) and its own `chunked_prefill_size` and
  `max_prefill_tokens`; the mocker's SGLang engine ignores `max_num_batched_tokens`.

The protocols (`bench/fidelity.py` replays every row by each; docs/fidelity/index.md):
- `aiconfigurator-benchmark`: what aiconfigurator's generator writes for an agg benchmark of the row's
  backend (its `rule_plugin/benchmark/<backend>.rule`): batch cap = the row's concurrency `c`, and a step
  budget of c + ISL + 1500 tokens (vLLM; TRT-LLM rounded up to its 32-token blocks, chunked prefill off as
  its template leaves it), or for SGLang a prefill budget of ISL + 1500 with SGLang's default chunk. The
  rows come from aiconfigurator's own measurement campaign, so this is the best guess at each row's own
  settings; the default.
- `engine-defaults`: each engine as served with none of these set, by its documented defaults (ENGINE_DEFAULTS).
- `chunk-2048`: prompts prefilled in chunks of 2048 tokens.
- `search-default`: the search's first agg_max_num_batched_tokens, 8192, as every row was replayed
  before the protocol study (SGLang: its chunk of 8192, the mocker's default).

Where rows record no settings, `spica fidelity --fit` chooses among FIT_PROTOCOLS per (system, backend,
model) by cross-validation within the fitting half (fidelity/choice.py).

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

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from spica_lib.fidelity.silicon import SiliconRow

MIN_MAX_NUM_SEQS = 256  # a fixed-budget protocol leaves the batch cap at the search's first value (or c)
AIC_BENCHMARK_HEADROOM = 1500  # tokens the generator's benchmark rules add to the ISL (and batch size)
TRTLLM_TOKENS_PER_BLOCK = 32  # the generator's benchmark rule rounds TRT-LLM's max_num_tokens up to these
GIB = 1 << 30
# SGLang's default chunked_prefill_size by GPU memory: 8192 below 160 GB (H100, H200), 16384 at or above.
SGLANG_LARGE_GPU_GIB = 160
# Each engine served with none of the scheduler's settings given, as its documentation states them:
# - vLLM (V1, >= 0.10): the OpenAI server on a GPU of >= 70 GiB other than A100 (every system measured here)
#   takes 8192 batched tokens and 1024 sequences; chunked prefill is always on.
# - TRT-LLM (trtllm-serve / LLM API): max_num_tokens 8192, max_batch_size 2048, chunked prefill off.
# - SGLang: chunked_prefill_size by GPU memory (above), max_prefill_tokens 16384; max_running_requests is
#   sized from the KV pool, never below a loop that fits, so the loop is admitted whole.
ENGINE_DEFAULTS: dict[str, dict[str, Any]] = {
    "vllm": {"max_num_batched_tokens": 8192, "max_num_seqs": 1024},
    "trtllm": {"max_num_batched_tokens": 8192, "max_num_seqs": 2048, "enable_chunked_prefill": False},
    "sglang": {"max_prefill_tokens": 16384},
}


def sglang_default_chunk(system: str) -> int:
    """SGLang's default chunked_prefill_size on `system`'s GPU."""
    from spica_lib.facts.hardware import system_facts

    return 16384 if system_facts(system).vram_bytes >= SGLANG_LARGE_GPU_GIB * GIB else 8192


class ReplayProtocol(BaseModel):
    """The engine settings a row is replayed with, and why."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    rule: Literal["fixed", "aiconfigurator_benchmark", "engine_defaults", "vllm_benchmark_everywhere"]
    max_num_batched_tokens: int | None = None  # a fixed protocol's budget
    why: str

    def settings(self, row: SiliconRow) -> dict[str, Any]:
        """The row's engine settings as the mocker takes them: `max_num_batched_tokens` and `max_num_seqs` (the
        search's knobs), and where the backend reads them `enable_chunked_prefill` and `sglang` ({chunked_prefill_size,
        max_prefill_tokens}). Only settings the row's engine reads are given."""
        c, backend = row.concurrency, row.backend
        if self.rule == "vllm_benchmark_everywhere":  # BEFORE_71: vLLM's rule, whatever the backend
            return {"max_num_batched_tokens": c + row.isl + AIC_BENCHMARK_HEADROOM, "max_num_seqs": c}
        if self.rule == "aiconfigurator_benchmark":
            if backend == "sglang":
                return {"max_num_seqs": c, "sglang": {"chunked_prefill_size": sglang_default_chunk(row.system),
                                                      "max_prefill_tokens": row.isl + AIC_BENCHMARK_HEADROOM}}  # fmt: skip
            tokens = c + row.isl + AIC_BENCHMARK_HEADROOM
            if backend == "trtllm":
                tokens = -(-tokens // TRTLLM_TOKENS_PER_BLOCK) * TRTLLM_TOKENS_PER_BLOCK
                return {"max_num_batched_tokens": tokens, "max_num_seqs": c, "enable_chunked_prefill": False}
            return {"max_num_batched_tokens": tokens, "max_num_seqs": c}
        if self.rule == "engine_defaults":
            defaults = dict(ENGINE_DEFAULTS[backend])
            if backend == "sglang":
                chunk = sglang_default_chunk(row.system)
                return {"max_num_seqs": max(MIN_MAX_NUM_SEQS, c), "sglang": {"chunked_prefill_size": chunk, **defaults}}
            return defaults
        assert self.max_num_batched_tokens is not None
        seqs = max(MIN_MAX_NUM_SEQS, c)
        if backend == "sglang":
            return {"max_num_seqs": seqs, "sglang": {"chunked_prefill_size": self.max_num_batched_tokens}}
        return {"max_num_batched_tokens": self.max_num_batched_tokens, "max_num_seqs": seqs}

    def prefill_budget(self, row: SiliconRow) -> int:
        """The most prompt tokens one step prefills under these settings (aiconfigurator's estimate takes it)."""
        settings = self.settings(row)
        if "sglang" in settings:
            return min(settings["sglang"].values())
        return settings["max_num_batched_tokens"]

    def describe(self) -> str:
        if self.rule == "vllm_benchmark_everywhere":
            return f"max_num_seqs = batch size, max_num_batched_tokens = batch size + ISL + {AIC_BENCHMARK_HEADROOM} ({self.why})"
        if self.rule == "aiconfigurator_benchmark":
            return (f"max_num_seqs = batch size, max_num_batched_tokens = batch size + ISL + {AIC_BENCHMARK_HEADROOM} "
                    f"(TRT-LLM: in {TRTLLM_TOKENS_PER_BLOCK}-token blocks, chunked prefill off; SGLang: "
                    f"max_prefill_tokens = ISL + {AIC_BENCHMARK_HEADROOM}, its default chunk) ({self.why})")  # fmt: skip
        if self.rule == "engine_defaults":
            return ("vLLM 8192 tokens per step and 1024 sequences; TRT-LLM 8192 tokens, 2048 sequences, chunked prefill "
                    "off; SGLang chunks of 8192 (16384 on GPUs of 160 GB or more), 16384 prefill tokens "
                    f"({self.why})")  # fmt: skip
        return f"max_num_batched_tokens {self.max_num_batched_tokens} (SGLang: its chunk) ({self.why})"


AIC_BENCHMARK = ReplayProtocol(
    name="aiconfigurator-benchmark",
    rule="aiconfigurator_benchmark",
    why="what aiconfigurator's generator writes for an agg benchmark of the row's backend; the rows record no "
    "settings of their own",
)
ENGINE_DEFAULT = ReplayProtocol(
    name="engine-defaults", rule="engine_defaults", why="each engine's documented defaults, as served with none set"
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


# How every agg row was replayed before issue 71: vLLM's benchmark rule for every backend (SGLang's engine ignores
# its max_num_batched_tokens, so SGLang rows ran the mocker's SGLang defaults; TRT-LLM rows chunked their prefill).
# Not a protocol to choose: bench/fidelity_load.py replays it to measure the earlier fit on the same rows.
BEFORE_71 = ReplayProtocol(name="aiconfigurator-benchmark-before-71", rule="vllm_benchmark_everywhere",
                           why="vLLM's benchmark rule for every backend, as before issue 71")  # fmt: skip

MEASURED = AIC_BENCHMARK  # the default: the protocol believed to be the measurement's
PROTOCOLS = {p.name: p for p in (AIC_BENCHMARK, ENGINE_DEFAULT, CHUNK_2048, SEARCH_DEFAULT)}
# The documented set `--fit` chooses among by cross-validation within the fitting half (fidelity/choice.py).
FIT_PROTOCOLS = (AIC_BENCHMARK, ENGINE_DEFAULT, CHUNK_2048)
