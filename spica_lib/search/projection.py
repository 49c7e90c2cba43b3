"""Projection: from a point in a smooth feature space to a real layout of the branch's pool.

Vizier searches a few continuous and categorical features of a layout — the share of the GPU
budget used, GPUs per engine (log scale), attention and FFN parallel modes, in disagg the
prefill share of GPUs, and with an inventory of several GPU types each role's type — instead of an
index into a list of hundreds of layouts. `project` maps a
requested point to the nearest layout the chosen backend can run: first the fewest mismatched
modes, then the smallest normalised distance, then a fixed tie-break. It is deterministic and
history-free: the same point always gives the same layout.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from spica_lib.facts.parallel import DisaggConfig, ParallelConfig, ReplicaConfig

Kind = Literal["float", "discrete", "categorical"]
ATTENTION_ORDER = ("tp", "dp")
FFN_ORDER = ("ep", "tp")


class FeatureParameter(BaseModel):
    """One searched feature: a float range, a discrete set (log scale) or categories."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    kind: Kind
    low: float | None = None
    high: float | None = None
    values: tuple[Any, ...] = ()
    default: Any


class Projection(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    config: ReplicaConfig | DisaggConfig
    requested: dict[str, Any]
    actual: dict[str, Any]
    distance: float
    mode_projected: bool  # no layout had the requested attention/FFN modes


def _role_features(prefix: str, replica: ReplicaConfig, is_moe: bool) -> dict[str, Any]:
    shape = replica.shape
    out: dict[str, Any] = {
        f"{prefix}_num_gpus_per_engine_target": float(shape.gpus),
        f"{prefix}_attention_mode": "dp" if shape.attention_dp > 1 else "tp",
    }
    if is_moe:
        out[f"{prefix}_ffn_mode"] = "ep" if shape.moe_ep > 1 else "tp"
    if replica.sku is not None:  # an inventory of several GPU types: the role's is searched as a category
        out[f"{prefix}_sku"] = replica.sku
    return out


def _is_categorical(name: str) -> bool:
    return name.endswith(("_mode", "_sku"))


def _transform(name: str, value: float) -> float:
    return math.log2(value) if name.endswith("_num_gpus_per_engine_target") else value


class ParallelConfigProjector:
    """Features and projection for one branch's pool (a list of configs with their backends)."""

    def __init__(self, pool: list[tuple[ParallelConfig, list[str]]], gpu_budget: int | None):
        if not pool:
            raise ValueError("cannot project onto an empty pool")
        self.pool = pool
        self.gpu_budget = gpu_budget or max(config.total_gpus for config, _ in pool)
        self.is_moe = any(replica.shape.is_moe_layout for config, _ in pool for replica in _replicas(config))
        self.features = [self.encode(config) for config, _ in pool]
        self.parameters = self._parameters()

    def encode(self, config: ParallelConfig) -> dict[str, Any]:
        out: dict[str, Any] = {"used_gpu_ratio": config.total_gpus / self.gpu_budget}
        if isinstance(config, DisaggConfig):
            out["prefill_gpu_share"] = config.prefill.total_gpus / config.total_gpus
            out.update(_role_features("prefill", config.prefill, self.is_moe))
            out.update(_role_features("decode", config.decode, self.is_moe))
        else:
            out.update(_role_features("agg", config, self.is_moe))
        return out

    def _parameters(self) -> list[FeatureParameter]:
        names = list(self.features[0])
        params = []
        for name in names:
            values = [f[name] for f in self.features]
            param = self._parameter(name, values)
            if param is not None:
                params.append(param)
        return params

    def _parameter(self, name: str, values: list[Any]) -> FeatureParameter | None:
        if _is_categorical(name):
            order = FFN_ORDER if "ffn" in name else ATTENTION_ORDER
            if name.endswith("_sku"):
                order = tuple(dict.fromkeys(values))  # the pool's order: the inventory's
            present = tuple(v for v in order if v in set(values))
            if len(present) < 2:
                return None
            return FeatureParameter(name=name, kind="categorical", values=present, default=present[0])
        if name.endswith("_num_gpus_per_engine_target"):
            distinct = tuple(sorted(set(values)))
            if len(distinct) < 2:
                return None
            return FeatureParameter(name=name, kind="discrete", values=distinct, default=_log_middle(distinct))
        low, high = min(values), max(values)
        if low == high:
            return None
        default = 1.0 if name == "used_gpu_ratio" else 0.5
        return FeatureParameter(name=name, kind="float", low=low, high=high, default=min(max(default, low), high))

    def project(self, params: dict[str, Any], backend: str) -> Projection:
        """The layout nearest to the requested point among those `backend` can run."""
        return next(self.nearest(params, backend))

    def nearest(self, params: dict[str, Any], backend: str) -> Iterator[Projection]:
        """Every layout `backend` can run, nearest to the requested point first: the fewest mismatched modes,
        then the smallest distance, then a fixed tie-break. The first is the projection; a proposal that
        lands on a deployment already replayed moves down this order (search/moves.py)."""
        requested = {p.name: params.get(p.name, p.default) for p in self.parameters}
        requested = {k: (str(v) if _is_categorical(k) else float(v)) for k, v in requested.items()}
        candidates = [(i, c) for i, (c, backends) in enumerate(self.pool) if backend in backends]
        if not candidates:
            raise ValueError(f"backend '{backend}' has no valid parallel config in this branch")
        numeric = [k for k in requested if not _is_categorical(k)]
        spans = {}
        for name in numeric:
            values = [_transform(name, self.features[i][name]) for i, _ in candidates]
            spans[name] = max(values) - min(values)

        def mismatches(index: int) -> int:
            return sum(self.features[index][k] != v for k, v in requested.items() if _is_categorical(k))

        def distance(index: int) -> float:
            total = 0.0
            for name in numeric:
                if spans[name] > 0:
                    delta = _transform(name, self.features[index][name]) - _transform(name, requested[name])
                    total += (delta / spans[name]) ** 2
            return total

        scored = [(mismatches(i), distance(i), c.sort_key(), i, c) for i, c in candidates]
        for missed, gap, _, index, config in sorted(scored, key=lambda item: item[:3]):
            yield Projection(
                config=config,
                requested=requested,
                actual=self.features[index],
                distance=gap,
                mode_projected=missed > 0,
            )


def _replicas(config: ParallelConfig) -> list[ReplicaConfig]:
    return [config.prefill, config.decode] if isinstance(config, DisaggConfig) else [config]


def _log_middle(values: tuple[float, ...]) -> float:
    """The value nearest, in log space, to the geometric middle of the range (ties to the smaller)."""
    middle = math.log2(math.sqrt(values[0] * values[-1]))
    return min(values, key=lambda v: (abs(math.log2(v) - middle), v))
