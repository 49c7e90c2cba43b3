"""The deployment plan of one candidate: engine arguments per role, worker counts, router and planner.

The plan is plain data (JSON-ready dicts), so it can be hashed, stored in a trial file, handed to
a child process and turned into Dynamo objects only where the replay runs. Engine arguments carry
aiconfigurator's native timing fields (`aic_*`), so every simulated step is timed from the perf DB, and each engine
knob of the table (config/knobs.py) under the argument the table names for it.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, model_validator

from spica_lib.base.dynamo_env import prepare_dynamo_import
from spica_lib.config.knobs import KNOBS, role_field, role_knobs, router_knobs
from spica_lib.facts.calibration import speedup_ratios

MTP = KNOBS["nextn"]

PLANNER_PASSTHROUGH = (
    "enable_throughput_scaling",
    "enable_load_scaling",
    "throughput_adjustment_interval_seconds",
    "load_adjustment_interval_seconds",
    "max_num_fpm_samples",
    "fpm_sample_bucket_size",
    "load_scaling_down_sensitivity",
    "load_min_observations",
    "load_predictor",
    "load_predictor_log1p",
    "prophet_window_size",
    "kalman_q_level",
    "kalman_q_trend",
    "kalman_r",
    "kalman_min_points",
)


class DeploymentPlan(BaseModel):
    """What the replay runs. Static (no planner) exactly when `planner_config` is None."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    deployment_mode: Literal["agg", "disagg"]
    agg_engine_args: dict[str, Any] | None = None
    prefill_engine_args: dict[str, Any] | None = None
    decode_engine_args: dict[str, Any] | None = None
    num_workers: int = 0
    num_prefill_workers: int = 0
    num_decode_workers: int = 0
    router_mode: Literal["round_robin", "kv_router"] = "round_robin"
    router_config: dict[str, float] | None = None
    planner_config: dict[str, Any] | None = None

    @property
    def is_static(self) -> bool:
        return self.planner_config is None

    @property
    def routing_targets(self) -> int:
        """The most workers x attention-DP ranks the router can choose among in any one role."""
        if self.deployment_mode == "agg":
            return self.num_workers * _dp_ranks(self.agg_engine_args)
        return max(
            self.num_prefill_workers * _dp_ranks(self.prefill_engine_args),
            self.num_decode_workers * _dp_ranks(self.decode_engine_args),
        )

    @model_validator(mode="after")
    def _roles_match_mode(self) -> DeploymentPlan:
        if self.deployment_mode == "agg" and (self.agg_engine_args is None or self.num_workers < 1):
            raise ValueError("an agg plan needs agg_engine_args and at least one worker")
        if self.deployment_mode == "disagg" and (self.prefill_engine_args is None or self.decode_engine_args is None):
            raise ValueError("a disagg plan needs prefill_engine_args and decode_engine_args")
        return self


def _dp_ranks(args: dict[str, Any] | None) -> int:
    return int((args or {}).get("aic_attention_dp_size") or 1)


def role_sku(sample: dict[str, Any], role: str) -> str:
    """The GPU type one role (`agg`, `prefill` or `decode`) runs on: its own in an inventory, else the run's."""
    return sample.get("sku" if role == "agg" else f"{role}_sku") or sample["hardware_sku"]


def engine_args(sample: dict[str, Any], role: str, backend_version: str) -> dict[str, Any]:
    """MockEngineArgs keyword arguments for one role (`agg`, `prefill` or `decode`)."""
    shape = "" if role == "agg" else f"{role}_"
    backend = sample["backend"]
    system = role_sku(sample, role)
    if system != sample["hardware_sku"]:  # another GPU type of the inventory has its own perf-DB version
        from spica_lib.facts.catalog import resolve_backend_version

        backend_version = resolve_backend_version(system, backend) or backend_version
    args: dict[str, Any] = {
        "worker_type": "aggregated" if role == "agg" else role,
        "engine_type": backend,
        "aic_backend": backend,
        "aic_backend_version": backend_version,
        "aic_system": system,
        "aic_model_path": sample["model_name"],
        "aic_tp_size": sample[f"{shape}tp"],
        "aic_attention_dp_size": sample[f"{shape}attention_dp"],
    }
    # Each engine knob of the role (config/knobs.py) as the mocker names it for this backend; one the sample leaves
    # out is at the value that changes nothing, which the mocker's own default means too.
    for knob in role_knobs(role):
        name = role_field(role, knob.name)
        if name in sample:
            args[knob.replay_argument(backend)] = sample[name]
    if sample[f"{shape}moe_tp"] * sample[f"{shape}moe_ep"] > 1:
        args["aic_moe_tp_size"] = sample[f"{shape}moe_tp"]
        args["aic_moe_ep_size"] = sample[f"{shape}moe_ep"]
    if args.get(MTP.replay_argument(backend)):  # drafting: the acceptance the replay's gain rests on, stated
        args["aic_nextn_accept_rates"] = ",".join(f"{rate:g}" for rate in sample["nextn_accept_rates"])
    if sample.get("aic_fmha_dtype"):
        args["aic_fmha_dtype"] = sample["aic_fmha_dtype"]
    if sample.get("startup_time") is not None:
        args["startup_time"] = sample["startup_time"]
    if sample.get("prefill_step_scale") is not None:  # an opted-in calibration (facts/calibration.py)
        args.update(speedup_ratios(sample["prefill_step_scale"], sample["decode_step_scale"]))
    return args


def planner_config(
    sample: dict[str, Any], optimization_target: str, sla_ttft_ms: float | None, sla_itl_ms: float | None
) -> dict[str, Any] | None:
    """The Dynamo PlannerConfig payload, or None when the candidate's policy does not scale."""
    if not (sample.get("enable_throughput_scaling") or sample.get("enable_load_scaling")):
        return None
    if optimization_target == "sla" and (sla_ttft_ms is None or sla_itl_ms is None):
        raise ValueError(
            "SLA-based planner scaling (optimization_target='sla') needs both ttft_ms and itl_ms; "
            "an e2e-only SLA cannot set the planner's scaling target"
        )
    mode = sample["deployment_mode"]
    config: dict[str, Any] = {
        "mode": mode,
        "optimization_target": optimization_target,
        # Reports and the live dashboard cost seconds per replay and write files nobody reads here.
        "report_interval_hours": None,
        "live_dashboard_port": 0,
        "metric_pulling_prometheus_extra_query_params": None,
        "max_gpu_budget": sample["gpu_budget"],
    }
    # An unset interval (the mode is off) is left to the planner's default: it takes no None there.
    config.update({key: sample[key] for key in PLANNER_PASSTHROUGH if sample.get(key) is not None})
    for key in ("min_gpu_budget", "min_endpoint"):
        if sample.get(key) is not None:
            config[key] = sample[key]
    if mode == "disagg":
        config["prefill_engine_num_gpu"] = sample["prefill_tp"] * sample["prefill_attention_dp"]
        config["decode_engine_num_gpu"] = sample["decode_tp"] * sample["decode_attention_dp"]
    else:
        config["decode_engine_num_gpu"] = sample["tp"] * sample["attention_dp"]
    if optimization_target == "sla":
        config["ttft_ms"] = sla_ttft_ms
        config["itl_ms"] = sla_itl_ms
    return config


def checked_by_dynamo(payload: dict[str, Any]) -> None:
    """Raise Dynamo's own `PlannerConfig` error (a ValueError) if it refuses this planner payload.

    Called where the replay runs, just before it: there the planner is already loaded, while in
    the suggest step its import would cost about 1 s every round.
    """
    prepare_dynamo_import()
    from dynamo.planner.config.planner_config import PlannerConfig

    PlannerConfig.model_validate(payload)


def build_deployment(
    sample: dict[str, Any],
    *,
    backend_version: str,
    optimization_target: str = "sla",
    sla_ttft_ms: float | None = None,
    sla_itl_ms: float | None = None,
) -> DeploymentPlan:
    mode = sample["deployment_mode"]
    router_mode = sample.get("router_mode", "round_robin")
    router = None
    if router_mode == "kv_router":  # the router's own settings (config/knobs.py), as its KvRouterConfig names them
        router = {knob.replay_argument(""): float(sample[knob.name]) for knob in router_knobs() if knob.name in sample}
    planner = planner_config(sample, optimization_target, sla_ttft_ms, sla_itl_ms)
    common = {"deployment_mode": mode, "router_mode": router_mode, "router_config": router, "planner_config": planner}
    if mode == "agg":
        return DeploymentPlan(
            **common, agg_engine_args=engine_args(sample, "agg", backend_version), num_workers=sample["replicas"]
        )
    return DeploymentPlan(
        **common,
        prefill_engine_args=engine_args(sample, "prefill", backend_version),
        decode_engine_args=engine_args(sample, "decode", backend_version),
        num_prefill_workers=sample["prefill_replicas"],
        num_decode_workers=sample["decode_replicas"],
    )
