"""The measured rows: aiconfigurator-core's `silicon_sample.csv`, and which of them this stack can replay.

A row is one measured serving point: system, backend (and the version measured), model, precision,
one engine's parallel shape, ISL/OSL and a closed-loop concurrency, with the measured mean TTFT and
TPOT. Tokens per second per GPU follow from those (Little's law over one request's life).
"""

from __future__ import annotations

import csv
import functools
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from spica_lib.facts.parallel import ParallelShape, ReplicaConfig


class SiliconRow(BaseModel):
    """One aggregated row of silicon_sample.csv."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    system: str
    backend: str
    measured_version: str
    model: str
    precision: str  # "" for the model's own dtype (bf16)
    isl: int
    osl: int
    concurrency: int
    tp: int
    attention_dp: int
    moe_tp: int
    moe_ep: int
    ttft_ms: float
    tpot_ms: float

    @property
    def layout(self) -> ReplicaConfig:
        shape = ParallelShape(tp=self.tp, attention_dp=self.attention_dp, moe_tp=self.moe_tp, moe_ep=self.moe_ep)
        return ReplicaConfig(shape=shape, replicas=1)

    @property
    def gpus(self) -> int:
        return self.layout.total_gpus

    @property
    def tokens_per_second_per_gpu(self) -> float:
        return tokens_per_second_per_gpu(self.concurrency, self.osl, self.ttft_ms, self.tpot_ms, self.gpus)


def tokens_per_second_per_gpu(concurrency: int, osl: int, ttft_ms: float, tpot_ms: float, gpus: int) -> float:
    """Output tokens per second per GPU of a closed loop: `concurrency` requests, each living TTFT + (OSL-1) TPOT."""
    life_ms = ttft_ms + max(0, osl - 1) * tpot_ms
    return concurrency * osl * 1000.0 / life_ms / gpus


def silicon_source() -> str:
    """The measured rows, named by file and package version (a calibration's `source`)."""
    from importlib import metadata

    return f"aiconfigurator-core {metadata.version('aiconfigurator-core')} systems/silicon_sample.csv"


CALIBRATION_SOURCE = "silicon_sample.csv (aiconfigurator-core), fitted by spica fidelity --fit"


def silicon_csv() -> Path:
    import aiconfigurator_core

    return Path(aiconfigurator_core.__file__).parent / "systems" / "silicon_sample.csv"


@functools.cache
def aggregated_rows(path: str | None = None) -> tuple[SiliconRow, ...]:
    """Every aggregated row of the file (disaggregated rows are not read yet)."""
    with open(path or silicon_csv(), newline="", encoding="utf-8") as handle:
        return tuple(_row(raw) for raw in csv.DictReader(handle) if raw["mode"] == "agg")


def _row(raw: dict[str, str]) -> SiliconRow:
    tp, dp = _int(raw["tp_size"], 1), _int(raw["attention_dp_size"], 1)
    moe_width = _int(raw["moe_tp_size"], 1) * _int(raw["moe_ep_size"], 1)
    if _int(raw["attention_dp_size"], 0) == 0 and moe_width > tp and moe_width % tp == 0:
        # Some MoE rows leave the attention-DP size blank while their MoE width spans more GPUs than the
        # attention TP: the engine's width is the MoE one, so the attention side is data parallel.
        dp = moe_width // tp
    return SiliconRow(
        id=raw["id"],
        system=raw["system"],
        backend=raw["backend"],
        measured_version=raw["backend_version"],
        model=raw["model_path"],
        precision=raw["precision"],
        isl=int(raw["isl"]),
        osl=int(raw["osl"]),
        concurrency=int(raw["batch_size"]),
        tp=tp,
        attention_dp=dp,
        moe_tp=_int(raw["moe_tp_size"], 1),
        moe_ep=_int(raw["moe_ep_size"], 1),
        ttft_ms=float(raw["silicon_ttft_ms"]),
        tpot_ms=float(raw["silicon_tpot_ms"]),
    )


def _int(text: str, default: int) -> int:
    """A size column: blank, or 0 as some rows write it, means the default."""
    value = int(float(text)) if text.strip() else 0
    return value if value >= 1 else default
