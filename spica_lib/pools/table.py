"""`pool.parquet`: a branch's pool as a flat table, one row per layout.

Columns: `config_id`, `label`, `used_gpus`, `backends` (list), the shape of each role
(`tp`, `attention_dp`, `moe_tp`, `moe_ep`, `pp`, `strategy`, `replicas`, `gpus_per_worker`; prefixed
`prefill_` / `decode_` in a disagg pool; `sku` only with an inventory of several GPU types), and
`<role>_kv_tokens_<backend>` (KV tokens per rank; empty
where that backend cannot run the layout). `PoolRecord` (in `spica_lib.pools.branches`) is the row model.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from spica_lib.base.artifacts import atomic_write_parquet
from spica_lib.config.fields import ROLES, SHAPE_FIELDS, role_prefix
from spica_lib.facts.parallel import DisaggConfig, ParallelShape, ReplicaConfig, role_configs
from spica_lib.pools.branches import PoolRecord


def pool_frame(records: list[PoolRecord], mode: str, backends: list[str]) -> pd.DataFrame:
    rows = []
    for index, record in enumerate(records):
        row: dict[str, object] = {
            "config_id": index,
            "label": record.config.label(),
            "used_gpus": record.config.total_gpus,
            "backends": list(record.backends),
        }
        for role, replica in role_configs(record.config).items():
            prefix = role_prefix(mode, role)
            row.update({f"{prefix}{name}": getattr(replica.shape, name) for name in SHAPE_FIELDS})
            row[f"{prefix}strategy"] = replica.shape.strategy
            row[f"{prefix}replicas"] = replica.replicas
            row[f"{prefix}gpus_per_worker"] = replica.shape.gpus
            row[f"{prefix}sku"] = replica.sku
        for role in ROLES[mode]:
            for backend in backends:
                row[f"{role}_kv_tokens_{backend}"] = record.kv_tokens.get(backend, {}).get(role)
        rows.append(row)
    frame = pd.DataFrame(rows, columns=_columns(mode, backends))
    if all(record.config == _without_skus(record.config) for record in records):
        frame = frame.drop(columns=[c for c in frame.columns if c.endswith("sku")])  # one GPU type: as before
    for column in frame.columns:
        if "_kv_tokens_" in column:
            frame[column] = frame[column].astype("Int64")
    return frame


def _columns(mode: str, backends: list[str]) -> list[str]:
    columns = ["config_id", "label", "used_gpus", "backends"]
    for role in ROLES[mode]:
        prefix = role_prefix(mode, role)
        columns += [f"{prefix}{name}" for name in (*SHAPE_FIELDS, "strategy", "replicas", "gpus_per_worker", "sku")]
    columns += [f"{role}_kv_tokens_{backend}" for role in ROLES[mode] for backend in backends]
    return columns


def write_pool(path: str | Path, records: list[PoolRecord], mode: str, backends: list[str]) -> None:
    """Write atomically: a temporary file in the same folder, then a rename."""
    atomic_write_parquet(path, pool_frame(records, mode, backends))


def read_pool(path: str | Path, mode: str) -> list[PoolRecord]:
    frame = pd.read_parquet(path)
    return [_record(row, mode) for row in frame.to_dict("records")]


def _record(row: dict, mode: str) -> PoolRecord:
    roles = {role: _replica(row, role_prefix(mode, role)) for role in ROLES[mode]}
    config = roles["agg"] if mode == "agg" else DisaggConfig(prefill=roles["prefill"], decode=roles["decode"])
    backends = [str(b) for b in row["backends"]]
    tokens = {b: {role: int(row[f"{role}_kv_tokens_{b}"]) for role in ROLES[mode]} for b in backends}
    return PoolRecord(config=config, backends=backends, kv_tokens=tokens)


def _replica(row: dict, prefix: str) -> ReplicaConfig:
    shape = ParallelShape(**{name: int(row[f"{prefix}{name}"]) for name in SHAPE_FIELDS})
    sku = row.get(f"{prefix}sku")
    return ReplicaConfig(shape=shape, replicas=int(row[f"{prefix}replicas"]), sku=sku if isinstance(sku, str) else None)


def _without_skus(config: ReplicaConfig | DisaggConfig) -> ReplicaConfig | DisaggConfig:
    if isinstance(config, DisaggConfig):
        return DisaggConfig(prefill=_without_skus(config.prefill), decode=_without_skus(config.decode))
    return config.model_copy(update={"sku": None})
