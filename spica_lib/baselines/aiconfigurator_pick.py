"""aiconfigurator's own pick: what its search (`aiconfigurator cli default`) recommends for the sweep.

It is given what the sweep is given: the model, the hardware, the GPU budget, the SLA (TTFT and
ITL bounds; none means unbounded) and the workload's mean prompt and output lengths (with several
workloads, the longest of each), for each backend and deployment mode the search space allows. Its
best by its own measure (tokens/s per GPU under the bounds) is the pick. It runs on its static
estimate, in seconds, before any replay, so the workflow runs it next to the search.
"""

from __future__ import annotations

import contextlib
import io
import logging
import math
import time
import warnings
from importlib import metadata
from typing import Any

from spica_lib.baselines.aiconfigurator_cache import cached_search
from spica_lib.baselines.model import AiconfiguratorPick
from spica_lib.config import SmartSearchConfig
from spica_lib.facts.catalog import CatalogFacts, resolve_backend_version
from spica_lib.facts.parallel import DisaggConfig, ParallelShape, ReplicaConfig
from spica_lib.facts.replay_limits import layout_limit, mode_limit
from spica_lib.pools.estimate import traffic_of

UNBOUNDED_MS = 1e9  # a bound aiconfigurator never hits: the SLA leaves this latency free
PICK_MEASURE = "tokens/s/gpu_cluster"  # aiconfigurator's own ranking measure


def aiconfigurator_pick(config: SmartSearchConfig, known: CatalogFacts | None = None) -> AiconfiguratorPick:
    """aiconfigurator's best deployment for the sweep, or the reason there is none.

    `known`: the run's catalog facts (config.json), whose perf-DB versions stand for the pick's system when
    it is theirs; else they are resolved here (reading every system's perf-DB index takes a second or more).
    """
    started = time.perf_counter()
    space, sla = config.search_space.largest_sku_space(), config.goal.sla
    traffics = [traffic_of(w) for w in config.workloads or [config.workload]]
    if any(t is None for t in traffics):
        return AiconfiguratorPick(problem="a kv_load_ratio workload has no fixed traffic to size a pick for")
    isl, osl = max(t.isl for t in traffics), max(t.osl for t in traffics)
    bounds = {
        "ttft": float(sla.ttft_ms) if sla and sla.ttft_ms else UNBOUNDED_MS,
        "tpot": float(sla.itl_ms) if sla and sla.itl_ms else UNBOUNDED_MS,
        "request_latency": float(sla.e2e_ms) if sla and sla.e2e_ms else None,
    }
    asked = {"isl": isl, "osl": osl, "ttft_ms": bounds["ttft"], "tpot_ms": bounds["tpot"]}
    rows: dict[str, dict[str, Any]] = {}
    problems = []
    for backend in space.backend:
        if known is not None and known.hardware_sku == space.hardware_sku and backend in known.perf_db_versions:
            version = known.perf_db_versions[backend]
        else:
            version = resolve_backend_version(space.hardware_sku, backend)
        if version is None:
            problems.append(f"{backend}: no perf database on {space.hardware_sku}")
            continue
        try:
            best = _search(space.model_name, space.gpu_budget, space.hardware_sku, backend, version, isl, osl, bounds)
        except Exception as exc:  # aiconfigurator finding nothing raises; that is a result, not a crash
            problems.append(f"{backend}: {type(exc).__name__}: {str(exc)[:300]}")
            continue
        for mode, row in best.items():
            if mode not in space.deployment_mode:
                continue
            unreplayable = _replay_limit(mode, backend, row, space.gpu_budget)
            if unreplayable:  # a pick the replay cannot score is no baseline; the other modes' picks stand
                problems.append(f"{mode}/{backend}: its pick uses {unreplayable}")
                continue
            rows[f"{mode}/{backend}"] = row
    common = {**asked, "aiconfigurator_version": metadata.version("aiconfigurator"), "seconds": 0.0}
    considered = {name: float(row[PICK_MEASURE]) for name, row in rows.items()}
    if not rows:
        problem = "aiconfigurator found no configuration within the bounds" + (
            f" ({'; '.join(problems)})" if problems else ""
        )
        return AiconfiguratorPick(**common, problem=problem, seconds=time.perf_counter() - started)
    name = max(considered, key=considered.get)
    mode, backend = name.split("/")
    row = rows[name]
    rates = [t.rate for t in traffics]
    rate = max(rates) if all(r is not None for r in rates) else None
    try:
        layout, batch = _layout(mode, row, space.gpu_budget)
        layout, sizing = sized_to_load(mode, row, layout, space.gpu_budget, rate)
    except ValueError as exc:
        return AiconfiguratorPick(
            **common, considered=considered, problem=str(exc), seconds=time.perf_counter() - started
        )
    estimate = {k: float(row[k]) for k in ("ttft", "tpot", "tokens/s/gpu", PICK_MEASURE, "concurrency") if k in row}
    return AiconfiguratorPick(
        **{**common, "seconds": time.perf_counter() - started},
        deployment_mode=mode,
        backend=backend,
        parallel_config=layout,
        max_num_seqs=batch,
        estimate=estimate,
        considered=considered,
        offered_rate=rate,
        sizing=sizing,
    )


def sized_to_load(
    mode: str, row: dict[str, Any], layout: ReplicaConfig | DisaggConfig, budget: int, rate: float | None
) -> tuple[ReplicaConfig | DisaggConfig, str]:
    """The fewest replicas of the picked shape that serve `rate` requests/s by aiconfigurator's own
    estimate (capped by the budget), and a sentence saying how it was sized.

    aiconfigurator fills the GPU budget; replayed at the sweep's offered load, the extra replicas
    only idle and divide its per-GPU score. Without an offered rate (a closed loop) it stays as picked.
    """
    if rate is None:
        return layout, "as aiconfigurator sized it (the budget filled): a closed-loop workload offers no rate to size to"
    if isinstance(layout, ReplicaConfig):
        per_replica = float(row["seq/s"])
        ceiling = max(1, budget // layout.shape.gpus)
        needed = max(1, math.ceil(rate / per_replica - 1e-9))
        sized = layout.model_copy(update={"replicas": min(needed, ceiling)})
        if needed > ceiling:
            return sized, (f"{ceiling} replica(s), the budget's most: its estimate needs {needed} for {rate:g} req/s "
                           f"({per_replica:.3g} req/s each)")  # fmt: skip
        return sized, f"{needed} replica(s) for {rate:g} req/s by its estimate ({per_replica:.3g} req/s each)"
    workers = {}
    for role, key in (("prefill", "(p)seq/s/worker"), ("decode", "(d)seq/s/worker")):
        workers[role] = max(1, math.ceil(rate / float(row[key]) - 1e-9))
    sized = DisaggConfig(
        prefill=layout.prefill.model_copy(update={"replicas": workers["prefill"]}),
        decode=layout.decode.model_copy(update={"replicas": workers["decode"]}),
    )
    if sized.total_gpus > budget:
        return layout, (f"as aiconfigurator sized it (the budget filled): its estimate cannot serve {rate:g} req/s "
                        f"within {budget} GPUs ({workers['prefill']} prefill and {workers['decode']} decode workers)")  # fmt: skip
    return sized, (f"{workers['prefill']} prefill and {workers['decode']} decode worker(s) for {rate:g} req/s by its "
                   f"estimate ({float(row['(p)seq/s/worker']):.3g} and {float(row['(d)seq/s/worker']):.3g} req/s each)")  # fmt: skip


def _search(model: str, gpus: int, sku: str, backend: str, version: str, isl: int, osl: int, bounds: dict[str, Any]):
    """aiconfigurator's best row per deployment mode ("agg", "disagg") for one backend (cached by its inputs)."""
    inputs = {"model": model, "gpus": gpus, "sku": sku, "backend": backend, "version": version, "isl": isl,
              "osl": osl, "bounds": bounds}  # fmt: skip
    return cached_search(inputs, lambda: _run_search(model, gpus, sku, backend, version, isl, osl, bounds))


def _run_search(model: str, gpus: int, sku: str, backend: str, version: str, isl: int, osl: int, bounds: dict[str, Any]):
    from aiconfigurator.cli.api import cli_default

    # Its search logs and prints per configuration; the pick is what is kept.
    logging.disable(logging.WARNING)
    try:
        with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # its deprecation notices for its own internals
            result = cli_default(
                model, gpus, sku, backend=backend, backend_version=version, isl=isl, osl=osl, top_n=1, **bounds
            )
    finally:
        logging.disable(logging.NOTSET)
    return {
        mode: frame.iloc[0].to_dict() for mode, frame in result.best_configs.items() if frame is not None and len(frame)
    }


def _replay_limit(mode: str, backend: str, row: dict[str, Any], budget: int) -> str | None:
    """Why the replay cannot run this pick (facts/replay_limits.py), or None (a layout error is left to _layout)."""
    try:
        layout, _ = _layout(mode, row, budget)
    except ValueError:
        return None
    return mode_limit(mode, backend) or layout_limit(layout)


def _layout(mode: str, row: dict[str, Any], budget: int) -> tuple[ReplicaConfig | DisaggConfig, dict[str, int]]:
    """The pick's layout in our terms, and its batch size per role (max_num_seqs)."""
    if mode == "agg":
        shape = _shape(row, "")
        replicas = budget // int(row["num_total_gpus"])  # aiconfigurator fills the budget with replicas
        return ReplicaConfig(shape=shape, replicas=max(1, replicas)), {"agg": int(row["bs"])}
    prefill = ReplicaConfig(shape=_shape(row, "(p)"), replicas=int(row["(p)workers"]))
    decode = ReplicaConfig(shape=_shape(row, "(d)"), replicas=int(row["(d)workers"]))
    return DisaggConfig(prefill=prefill, decode=decode), {"prefill": int(row["(p)bs"]), "decode": int(row["(d)bs"])}


def _shape(row: dict[str, Any], role: str) -> ParallelShape:
    if int(row[f"{role}pp"]) > 1:
        raise ValueError(
            f"aiconfigurator picked pipeline parallelism ({role}pp={row[f'{role}pp']}), which the replay does not model"
        )
    return ParallelShape(
        tp=int(row[f"{role}tp"]),
        attention_dp=int(row[f"{role}dp"]),
        moe_tp=int(row[f"{role}moe_tp"]),
        moe_ep=int(row[f"{role}moe_ep"]),
    )
