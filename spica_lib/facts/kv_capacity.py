"""KV-cache capacity of a worker shape, from aiconfigurator's memory estimator.

The answer is per attention-DP rank (TP and EP ranks share one KV cache): tokens for the pools'
fit check, and scheduler blocks exactly as the replay's mocker sizes its simulated cache. A shape
whose weights and activations leave no room for a KV cache is infeasible (None), never zero; any
other estimator failure is a real error and is raised with the shape that caused it.
"""

from __future__ import annotations

import logging
import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from spica_lib.facts.parallel import ParallelShape

# vLLM and SGLang size the KV cache from a fraction of total GPU memory, TRT-LLM from free memory.
MEMORY_FRACTION_KIND: dict[str, Literal["of_total", "of_free"]] = {
    "vllm": "of_total",
    "sglang": "of_total",
    "trtllm": "of_free",
}
_INFEASIBLE_MARKERS = ("no KV budget", "Invalid quantized MoE configuration")


class NoPerfDatabase(ValueError):
    """No aiconfigurator perf database for (hardware_sku, backend)."""


class KvEstimateError(RuntimeError):
    """The estimator failed for a reason other than 'does not fit'."""


class KvSettings(BaseModel):
    """Runtime settings that change how much memory is left for the KV cache."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_num_tokens: int = Field(default=8192, ge=1)
    max_batch_size: int = Field(default=256, ge=1)
    memory_fraction: float = Field(default=0.9, gt=0, le=1)
    nextn: int = Field(default=0, ge=0)


class KvEstimate(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    tokens_per_rank: int | None  # None: the shape leaves no memory for a KV cache
    reason: str | None = None


class KvBlocks(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    blocks_per_rank: int | None  # None: no whole block fits beside the weights and activations
    reason: str | None = None


class KvEstimator:
    """Memoised KV estimates for one (model, hardware). Not thread-safe; one per process is enough."""

    def __init__(self, model_name: str, sku: str, backend_versions: dict[str, str | None]):
        self.model_name = model_name
        self.sku = sku
        self.backend_versions = dict(backend_versions)
        self.calls = 0
        self._memo: dict[tuple[str, ParallelShape, KvSettings], KvEstimate] = {}
        self._blocks_memo: dict[tuple[str, ParallelShape, KvSettings, int], KvBlocks] = {}
        self._other_skus: dict[str, KvEstimator] = {}

    def on(self, sku: str | None) -> KvEstimator:
        """The estimator of another GPU type of an inventory (this one for None or its own SKU)."""
        if sku is None or sku == self.sku:
            return self
        if sku not in self._other_skus:
            from spica_lib.facts.catalog import versions_on

            self._other_skus[sku] = KvEstimator(self.model_name, sku, versions_on(sku, self.backend_versions))
        return self._other_skus[sku]

    def version(self, backend: str) -> str:
        version = self.backend_versions.get(backend)
        if not version:
            raise NoPerfDatabase(
                f"no perf database for hardware_sku={self.sku}, backend={backend}; "
                "KV-cache estimation needs one (pick another SKU or backend)"
            )
        return version

    def estimate(self, shape: ParallelShape, backend: str, settings: KvSettings) -> KvEstimate:
        key = (backend, shape, settings)
        if key not in self._memo:
            self._memo[key] = self._call(shape, backend, settings)
        return self._memo[key]

    def gpu_blocks(self, shape: ParallelShape, backend: str, settings: KvSettings, block_size: int) -> KvBlocks:
        """KV blocks per attention-DP rank of the cache the replay simulates for this engine.

        The mocker sizes its cache with aiconfigurator's `estimate_num_gpu_blocks` when no block count
        is given, with batch size 1, no MTP depth, no PP and MoE sizes only for MoE layouts; the same
        call with the same arguments gives the same count (tests/test_kv_load.py checks it).
        """
        key = (backend, shape, settings, block_size)
        if key not in self._blocks_memo:
            self._blocks_memo[key] = self._blocks_call(shape, backend, settings, block_size)
        return self._blocks_memo[key]

    def _blocks_call(self, shape: ParallelShape, backend: str, settings: KvSettings, block_size: int) -> KvBlocks:
        from aiconfigurator_core.sdk.memory import estimate_num_gpu_blocks

        moe = shape.moe_tp * shape.moe_ep > 1
        blocks = self._guarded(
            estimate_num_gpu_blocks,
            shape,
            backend,
            scheduler_block_size=block_size,
            max_num_tokens=settings.max_num_tokens,
            max_batch_size=1,
            memory_fraction_kind=MEMORY_FRACTION_KIND[backend],
            memory_fraction_value=settings.memory_fraction,
            tp_size=shape.tp,
            attention_dp_size=shape.attention_dp,
            moe_tp_size=shape.moe_tp if moe else None,
            moe_ep_size=shape.moe_ep if moe else None,
        )
        if isinstance(blocks, str):
            return KvBlocks(blocks_per_rank=None, reason=blocks)
        return KvBlocks(blocks_per_rank=int(blocks) or None, reason=None if blocks else "no whole KV block fits")

    def _call(self, shape: ParallelShape, backend: str, settings: KvSettings) -> KvEstimate:
        from aiconfigurator_core.sdk.memory import estimate_kv_cache

        result = self._guarded(
            estimate_kv_cache,
            shape,
            backend,
            max_num_tokens=settings.max_num_tokens,
            max_batch_size=settings.max_batch_size,
            memory_fraction_kind=MEMORY_FRACTION_KIND[backend],
            memory_fraction_value=settings.memory_fraction,
            tp_size=shape.tp,
            pp_size=shape.pp,
            attention_dp_size=shape.attention_dp,
            moe_tp_size=shape.moe_tp,
            moe_ep_size=shape.moe_ep,
            nextn=settings.nextn,
        )
        if isinstance(result, str):
            return KvEstimate(tokens_per_rank=None, reason=result)
        return KvEstimate(tokens_per_rank=int(result["total_kv_size_tokens"]))

    def _guarded(self, function: Any, shape: ParallelShape, backend: str, **kwargs: Any) -> Any:
        """The estimator's answer, or the reason (a str) when the shape leaves no room for a KV cache."""
        version = self.version(backend)
        logging.getLogger("aiconfigurator").setLevel(logging.ERROR)
        self.calls += 1
        try:
            return function(self.model_name, self.sku, backend, version, **kwargs)
        except ValueError as exc:
            if any(marker in str(exc) for marker in _INFEASIBLE_MARKERS):
                return _no_room(str(exc))
            raise KvEstimateError(self._context(shape, backend, version) + f": {exc}") from exc
        except Exception as exc:
            raise KvEstimateError(self._context(shape, backend, version) + f": {type(exc).__name__}: {exc}") from exc

    def _context(self, shape: ParallelShape, backend: str, version: str) -> str:
        return f"KV estimate failed for {self.model_name} on {self.sku} {backend} {version}, shape {shape.label()}"


def _no_room(message: str) -> str:
    """The estimator's 'no KV budget' text, in GiB."""
    found = re.search(r"non-KV memory \((\d+) bytes\).*capacity=(\d+) bytes", message)
    if not found:
        return message.strip()
    need, limit = (int(value) / 2**30 for value in found.groups())
    return f"weights and activations need {need:.0f} GiB per GPU, over the {limit:.0f} GiB memory limit"
