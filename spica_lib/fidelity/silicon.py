"""The measured rows: aiconfigurator-core's `silicon_sample.csv`, and which of them this stack can replay.

A row is one measured serving point: system, backend (and the version measured), model, precision,
the deployment's parallel layout, ISL/OSL and a closed-loop concurrency, with the measured mean TTFT
and TPOT. Tokens per second per GPU follow from those (Little's law over one request's life).

An aggregated row's layout is one engine (`tp_size` ... `moe_ep_size`, concurrency in `batch_size`).
A disaggregated row gives each role's shape (`prefill_tp_size` ..., `decode_moe_ep_size`) and worker
count; its `batch_size` is blank. The file holds three layouts of disagg rows (tests/test_fidelity_disagg.py
checks one of each by hand):
- `db-dump/...; silicon_concurrency=N; ...` rows: workers and per-role batch sizes written, the
  closed loop's concurrency in `silicon_data_source`;
- `source_file=<date>.csv; ...; silicon_concurrency=N; ...` rows: worker counts and batch sizes blank,
  and (where the same measurement is also in the db-dump layout) attention-DP ranks written as TP. Such a
  row is read only through its db-dump twin (`disaggregated_rows`);
- `source_file=.../aic-auto-gap-analysis/...` rows: workers and batch sizes written, but no
  concurrency anywhere. They cannot be replayed as a closed loop and are refused when read.
"""

from __future__ import annotations

import csv
import functools
import re
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, model_validator

from spica_lib.facts.parallel import DisaggConfig, ParallelConfig, ParallelShape, ReplicaConfig

Mode = Literal["agg", "disagg"]
CONCURRENCY_IN_SOURCE = re.compile(r"(?:^|;)\s*silicon_concurrency=(\d+)\s*(?:;|$)")


class RoleShape(BaseModel):
    """One disaggregated role as measured: its worker shape and how many workers, and the per-worker batch
    size where the row records one."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    workers: int = 1
    tp: int = 1
    attention_dp: int = 1
    moe_tp: int = 1
    moe_ep: int = 1
    batch_size: int | None = None

    @property
    def replica(self) -> ReplicaConfig:
        shape = ParallelShape(tp=self.tp, attention_dp=self.attention_dp, moe_tp=self.moe_tp, moe_ep=self.moe_ep)
        return ReplicaConfig(shape=shape, replicas=self.workers)


class SiliconRow(BaseModel):
    """One row of silicon_sample.csv (or of a user's file in its layout). An agg row's shape is `tp` ...
    `moe_ep`; a disagg row's is `prefill` and `decode` (its bare shape fields stay 1 and are not used)."""

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
    tp: int = 1
    attention_dp: int = 1
    moe_tp: int = 1
    moe_ep: int = 1
    ttft_ms: float
    tpot_ms: float
    # p90s, where the measurement has them (an AIPerf export): judged beside the means (fidelity/check.py).
    ttft_p90_ms: float | None = None
    tpot_p90_ms: float | None = None
    mode: Mode = "agg"
    prefill: RoleShape | None = None
    decode: RoleShape | None = None

    @model_validator(mode="after")
    def _roles_match_mode(self) -> SiliconRow:
        if (self.mode == "disagg") != (self.prefill is not None and self.decode is not None):
            raise ValueError(f"row {self.id}: a disagg row needs prefill and decode roles, an agg row has neither")
        return self

    @property
    def layout(self) -> ParallelConfig:
        if self.mode == "disagg":
            assert self.prefill is not None and self.decode is not None
            return DisaggConfig(prefill=self.prefill.replica, decode=self.decode.replica)
        shape = ParallelShape(tp=self.tp, attention_dp=self.attention_dp, moe_tp=self.moe_tp, moe_ep=self.moe_ep)
        return ReplicaConfig(shape=shape, replicas=1)

    @property
    def gpus(self) -> int:
        return self.layout.total_gpus

    @property
    def tokens_per_second_per_gpu(self) -> float:
        return tokens_per_second_per_gpu(self.concurrency, self.osl, self.ttft_ms, self.tpot_ms, self.gpus)


class UnreadRow(BaseModel):
    """A row of the file that does not describe a replayable measurement, and why (counted with the refusals)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    system: str
    backend: str
    model: str
    mode: str
    reason: str


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
    """Every aggregated row of the file."""
    with open(path or silicon_csv(), newline="", encoding="utf-8") as handle:
        return tuple(_agg_row(raw) for raw in csv.DictReader(handle) if raw["mode"] == "agg")


@functools.cache
def disaggregated_rows(path: str | None = None) -> tuple[SiliconRow | UnreadRow, ...]:
    """Every disaggregated row of the file: read, or (UnreadRow) why it cannot be.

    Some campaigns are in the file twice, from two dumps: the same traffic and the same measured TTFT and
    TPOT to the last digit. Such a measurement is read once, from the line that writes its worker counts
    (the `db-dump` layout). The `source_file=<date>.csv` layout leaves the worker counts blank and, where a
    twin shows what was measured, writes attention-DP ranks as TP (a twin of `P tp8 ep8 + D tp32` is
    `P 5 x dp8 ep8 + D dp32 ep32`): a row of that layout without a twin is not read (its deployment is unknown).
    """
    with open(path or silicon_csv(), newline="", encoding="utf-8") as handle:
        raws = [raw for raw in csv.DictReader(handle) if raw["mode"] == "disagg"]
    rows = [disagg_row(raw) for raw in raws]
    blank = {raw["id"] for raw in raws if not (raw["prefill_num_workers"].strip() and raw["decode_num_workers"].strip())}
    read: dict[tuple, str] = {}  # measurement -> the id it is read from
    for row in sorted((r for r in rows if isinstance(r, SiliconRow)), key=lambda r: r.id in blank):
        read.setdefault(_measurement(row), row.id)
    out: list[SiliconRow | UnreadRow] = []
    for row in rows:
        if isinstance(row, SiliconRow) and read[_measurement(row)] != row.id:
            reason = "a repeat of another row's measurement (the same campaign in two dumps)"
        elif isinstance(row, SiliconRow) and row.id in blank:
            reason = "worker counts blank (source_file layout): the deployment measured is not recorded"
        else:
            out.append(row)
            continue
        out.append(UnreadRow(id=row.id, system=row.system, backend=row.backend, model=row.model, mode="disagg",
                             reason=reason))  # fmt: skip
    return tuple(out)


def _measurement(row: SiliconRow) -> tuple:
    return (row.system, row.backend, row.measured_version, row.precision, row.isl, row.osl, row.concurrency,
            row.ttft_ms, row.tpot_ms)  # fmt: skip


def _agg_row(raw: dict[str, str]) -> SiliconRow:
    tp, dp = _int(raw["tp_size"], 1), _int(raw["attention_dp_size"], 1)
    moe_width = _int(raw["moe_tp_size"], 1) * _int(raw["moe_ep_size"], 1)
    if _int(raw["attention_dp_size"], 0) == 0 and moe_width > tp and moe_width % tp == 0:
        # Some MoE rows leave the attention-DP size blank while their MoE width spans more GPUs than the
        # attention TP: the engine's width is the MoE one, so the attention side is data parallel.
        dp = moe_width // tp
    return SiliconRow(
        **_common(raw),
        concurrency=int(raw["batch_size"]),
        tp=tp,
        attention_dp=dp,
        moe_tp=_int(raw["moe_tp_size"], 1),
        moe_ep=_int(raw["moe_ep_size"], 1),
    )


def disagg_row(raw: dict[str, str]) -> SiliconRow | UnreadRow:
    """One disagg line of the file's layout: the row, or why it describes no closed loop to replay."""
    concurrency = _concurrency(raw)
    if concurrency is None:
        return UnreadRow(id=raw["id"], system=raw["system"], backend=raw["backend"], model=raw["model_path"],
                         mode="disagg", reason="concurrency not recorded (batch_size blank and no "
                         "silicon_concurrency=N in silicon_data_source)")  # fmt: skip
    return SiliconRow(**_common(raw), concurrency=concurrency, mode="disagg",
                      prefill=_role(raw, "prefill"), decode=_role(raw, "decode"))  # fmt: skip


def _common(raw: dict[str, str]) -> dict[str, object]:
    return {
        "id": raw["id"],
        "system": raw["system"],
        "backend": raw["backend"],
        "measured_version": raw["backend_version"],
        "model": raw["model_path"],
        "precision": "" if raw["precision"] == "bf16" else raw["precision"],
        "isl": int(raw["isl"]),
        "osl": int(raw["osl"]),
        "ttft_ms": float(raw["silicon_ttft_ms"]),
        "tpot_ms": float(raw["silicon_tpot_ms"]),
    }


def _concurrency(raw: dict[str, str]) -> int | None:
    """A disagg row's closed-loop concurrency: `batch_size` when written, else `silicon_concurrency=N` in its source."""
    if raw.get("batch_size", "").strip():
        return int(float(raw["batch_size"]))
    found = CONCURRENCY_IN_SOURCE.search(raw.get("silicon_data_source", ""))
    return int(found.group(1)) if found else None


def _role(raw: dict[str, str], role: str) -> RoleShape:
    batch = raw.get(f"{role}_batch_size", "").strip()
    return RoleShape(
        workers=_int(raw[f"{role}_num_workers"], 1),
        tp=_int(raw[f"{role}_tp_size"], 1),
        attention_dp=_int(raw[f"{role}_attention_dp_size"], 1),
        moe_tp=_int(raw[f"{role}_moe_tp_size"], 1),
        moe_ep=_int(raw[f"{role}_moe_ep_size"], 1),
        batch_size=int(float(batch)) if batch else None,
    )


def _int(text: str, default: int) -> int:
    """A size column: blank, or 0 as some rows write it, means the default."""
    value = int(float(text)) if text.strip() else 0
    return value if value >= 1 else default
