"""What one trial replayed, per role, in the terms a deployment is checked against.

The source is the trial's deployment plan (`spec.replay.plan`): the engine arguments the mocker ran
with, the worker counts, the router's settings and the planner's payload. Each engine knob of the table
(config/knobs.py) is read by the argument the table names for it; one the plan leaves out is at the value that
changes nothing (the table's), or else the mocker's own default, read from `MockEngineArgs`' signature (chunked
prefill: on). The planner payload loses only what configures the offline replay itself (reports, dashboard,
Prometheus query parameters): a cluster's planner takes those from its own environment.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any

from pydantic import BaseModel, ConfigDict

from spica_lib.base.dynamo_env import prepare_dynamo_import
from spica_lib.config.knobs import KNOBS, role_knobs
from spica_lib.replay.plan import DeploymentPlan
from spica_lib.trial.spec import TrialRecord

REPLAY_ONLY_PLANNER_KEYS = (
    "report_interval_hours",
    "live_dashboard_port",
    "metric_pulling_prometheus_extra_query_params",
)


class RoleEngine(BaseModel):
    """One role's engine as replayed, backend-neutral."""

    model_config = ConfigDict(frozen=True)

    role: str  # agg, prefill or decode
    workers: int
    tp: int
    attention_dp: int
    moe_tp: int
    moe_ep: int
    settings: dict[str, Any]  # each engine knob of the role (config/knobs.py) by its name, as replayed
    chunked_prefill: bool
    system: str  # the GPU type its steps were timed on
    perf_db_version: str  # the perf-DB version of the backend they were timed with

    @property
    def gpus(self) -> int:
        return self.tp * self.attention_dp


class Replayed(BaseModel):
    model_config = ConfigDict(frozen=True)

    backend: str
    mode: str
    model: str
    roles: dict[str, RoleEngine]
    router_mode: str  # round_robin or kv_router
    router: dict[str, float]  # the KV router's settings (empty under round robin)
    planner: dict[str, Any] | None  # the planner payload for a cluster, None without a planner
    startup_time: float | None = None  # a simulated worker start-up (seconds), nothing a deployment sets

    def engine_settings(self, role: str) -> dict[str, Any]:
        """The knob settings a deployment starts this role's engines with: the role's own, and each knob every engine
        is started with (`every_engine`) at the value of the role that has one."""
        settings = dict(self.roles[role].settings)
        for engine in self.roles.values():
            for name, value in engine.settings.items():
                if KNOBS[name].every_engine:
                    settings.setdefault(name, value)
        return settings


def replayed(record: TrialRecord) -> Replayed:
    plan: DeploymentPlan = record.spec.replay.plan
    sample = record.spec.sample
    backend = sample["backend"]
    roles = {
        role: _role(role, args, workers, backend)
        for role, args, workers in (
            ("agg", plan.agg_engine_args, plan.num_workers),
            ("prefill", plan.prefill_engine_args, plan.num_prefill_workers),
            ("decode", plan.decode_engine_args, plan.num_decode_workers),
        )
        if args is not None
    }
    planner = None
    if plan.planner_config is not None:
        planner = {k: v for k, v in plan.planner_config.items() if k not in REPLAY_ONLY_PLANNER_KEYS}
        if planner.get("optimization_target") == "sla" and planner.get("enable_throughput_scaling"):
            planner["aic_perf_model"] = _performance_model(backend, sample["model_name"], roles)
    return Replayed(
        backend=backend,
        mode=plan.deployment_mode,
        model=sample["model_name"],
        roles=roles,
        router_mode=plan.router_mode,
        router=dict(plan.router_config or {}),
        planner=planner,
        startup_time=sample.get("startup_time"),
    )


def _role(role: str, args: dict[str, Any], workers: int, backend: str) -> RoleEngine:
    return RoleEngine(
        role=role,
        workers=workers,
        tp=args["aic_tp_size"],
        attention_dp=args.get("aic_attention_dp_size") or 1,
        moe_tp=args.get("aic_moe_tp_size", 1),
        moe_ep=args.get("aic_moe_ep_size", 1),
        settings={knob.name: _replayed_value(args, knob, backend) for knob in role_knobs(role)},
        chunked_prefill=args.get("enable_chunked_prefill", mocker_default("enable_chunked_prefill")),
        system=args["aic_system"],
        perf_db_version=args["aic_backend_version"],
    )


def _replayed_value(args: dict[str, Any], knob: Any, backend: str) -> Any:
    argument = knob.replay_argument(backend)
    if argument in args:
        return args[argument]
    return knob.inert if knob.inert is not None else mocker_default(argument)


def _performance_model(backend: str, model: str, roles: dict[str, RoleEngine]) -> dict[str, Any]:
    """The planner's aiconfigurator model of the engines: what the replayed planner sized SLA scaling with.

    Offline, Dynamo's replay gives the planner each role's aiconfigurator identity from the engine
    arguments; in a cluster the planner takes it as `aic_perf_model` (one GPU type: the decode role's).
    """
    decode = roles.get("decode") or roles["agg"]
    spec: dict[str, Any] = {
        "hf_id": model,
        "system": decode.system,
        "backend": backend,
        "backend_version": decode.perf_db_version,
        "decode_pick": _pick(decode),
    }
    if "prefill" in roles:
        spec["prefill_pick"] = _pick(roles["prefill"])
    return spec


def _pick(role: RoleEngine) -> dict[str, int]:
    return {"tp": role.tp, "pp": 1, "dp": role.attention_dp, "moe_tp": role.moe_tp, "moe_ep": role.moe_ep}


@functools.cache
def mocker_default(argument: str) -> Any:
    """The default of one of the mocker's engine arguments (what a plan that leaves it out replays)."""
    prepare_dynamo_import()
    from dynamo.mocker import MockEngineArgs

    return inspect.signature(MockEngineArgs).parameters[argument].default
