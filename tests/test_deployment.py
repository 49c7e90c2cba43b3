"""Deployment plans: engine arguments, worker counts, router and planner payloads."""

import os

import pytest
from conftest import ENGINE_KNOBS, build, config_data

from spica_lib.facts.parallel import DisaggConfig, ParallelShape, ReplicaConfig
from spica_lib.replay.plan import build_deployment
from spica_lib.trial.unroll import unroll_sample

SCALING = {"planner_fpm_sampling": "default", "planner_load_sensitivity": "default"}


def sample_for(config, mode="agg", backend="vllm", policy="disabled", router="round_robin", **space):
    search_space = build(config_data(search_space=space)).search_space
    sel = {
        "deployment_mode": mode,
        "backend": backend,
        "router_mode": router,
        "planner_scaling_policy": policy,
        **SCALING,
    }
    sel.update(ENGINE_KNOBS[mode])
    if router == "kv_router":
        sel.update(overlap_score_credit=0.5, prefill_load_scale=1.0, router_temperature=0.0)
    return unroll_sample(search_space, sel, config, {180.0: "prophet_w50_raw"})


TEP = ReplicaConfig(shape=ParallelShape(tp=4, moe_ep=4), replicas=2)
DENSE = ReplicaConfig(shape=ParallelShape(tp=2), replicas=3)
PAIR = DisaggConfig(
    prefill=ReplicaConfig(shape=ParallelShape(tp=8), replicas=1),
    decode=ReplicaConfig(shape=ParallelShape(tp=8), replicas=2),
)


def test_static_agg_plan():
    plan = build_deployment(sample_for(TEP), backend_version="0.24.0")
    assert plan.is_static and plan.planner_config is None and plan.num_workers == 2
    args = plan.agg_engine_args
    assert args["worker_type"] == "aggregated" and args["aic_backend"] == args["engine_type"] == "vllm"
    assert args["aic_tp_size"] == 4 and args["aic_moe_ep_size"] == 4 and args["aic_moe_tp_size"] == 1
    assert args["aic_backend_version"] == "0.24.0" and args["aic_system"] == "h200_sxm"
    assert args["aic_model_path"] == "Qwen/Qwen3-32B" and "num_gpu_blocks" not in args
    assert args["gpu_memory_utilization"] == 0.9


def test_dense_omits_moe_sizes():
    args = build_deployment(sample_for(DENSE), backend_version="0.24.0").agg_engine_args
    assert "aic_moe_tp_size" not in args and "aic_moe_ep_size" not in args


@pytest.mark.parametrize(
    "backend, field",
    [("vllm", "gpu_memory_utilization"), ("sglang", "mem_fraction_static"), ("trtllm", "free_gpu_memory_fraction")],
)
def test_engine_type_and_memory_field_track_the_backend(backend, field):
    plan = build_deployment(sample_for(PAIR, mode="disagg", backend=backend), backend_version="x")
    for args in (plan.prefill_engine_args, plan.decode_engine_args):
        assert args["engine_type"] == args["aic_backend"] == backend and field in args


def test_throughput_policy_plan():
    sample = sample_for(DENSE, policy="throughput_180_5")
    plan = build_deployment(
        sample, backend_version="0.24.0", optimization_target="sla", sla_ttft_ms=2000, sla_itl_ms=50
    )
    pc = plan.planner_config
    assert not plan.is_static and pc["mode"] == "agg" and pc["optimization_target"] == "sla"
    assert pc["throughput_adjustment_interval_seconds"] == 180 and pc["decode_engine_num_gpu"] == 2
    assert pc["load_predictor"] == "prophet" and (pc["ttft_ms"], pc["itl_ms"]) == (2000, 50)
    assert pc["report_interval_hours"] is None and pc["live_dashboard_port"] == 0


def test_runtime_limits_reach_the_planner_and_engines():
    sample = sample_for(DENSE, policy="load_180_5", gpu_budget=24, min_gpu_budget=8, min_endpoint=2, startup_time=30)
    plan = build_deployment(sample, backend_version="0.24.0", optimization_target="throughput")
    pc = plan.planner_config
    assert (pc["max_gpu_budget"], pc["min_gpu_budget"], pc["min_endpoint"]) == (24, 8, 2)
    assert pc["optimization_target"] == "throughput" and "ttft_ms" not in pc
    assert plan.agg_engine_args["startup_time"] == 30


def test_disagg_plan_has_both_roles():
    plan = build_deployment(
        sample_for(PAIR, mode="disagg", policy="load_180_5"), backend_version="0.24.0", optimization_target="throughput"
    )
    assert plan.prefill_engine_args["worker_type"] == "prefill" and plan.decode_engine_args["worker_type"] == "decode"
    assert (plan.num_prefill_workers, plan.num_decode_workers, plan.num_workers) == (1, 2, 0)
    assert plan.planner_config["prefill_engine_num_gpu"] == 8 and plan.planner_config["decode_engine_num_gpu"] == 8
    assert "ttft_ms" not in plan.planner_config and "decode_scale_up_kv_rate" not in plan.planner_config


def test_router_config_only_for_the_kv_router():
    kv = build_deployment(sample_for(DENSE, router="kv_router"), backend_version="x")
    assert kv.router_mode == "kv_router" and kv.router_config == {
        "overlap_score_credit": 0.5,
        "prefill_load_scale": 1.0,
        "router_temperature": 0.0,
    }
    assert build_deployment(sample_for(DENSE), backend_version="x").router_config is None


def test_e2e_only_sla_cannot_drive_sla_scaling():
    sample = sample_for(DENSE, policy="load_180_5")
    with pytest.raises(ValueError, match="ttft_ms"):
        build_deployment(sample, backend_version="x", optimization_target="sla", sla_ttft_ms=None, sla_itl_ms=None)
    assert build_deployment(
        sample, backend_version="x", optimization_target="sla", sla_ttft_ms=1, sla_itl_ms=1
    ).planner_config


@pytest.mark.slow
def test_planner_payload_is_a_valid_dynamo_planner_config(monkeypatch):
    for key in [k for k in os.environ if k.startswith("PROMETHEUS")]:
        monkeypatch.delenv(key)
    from dynamo.planner.config.planner_config import PlannerConfig

    for mode, config in (("agg", DENSE), ("disagg", PAIR)):
        sample = sample_for(config, mode=mode, policy="hybrid_180_5")
        payload = build_deployment(
            sample, backend_version="0.24.0", optimization_target="sla", sla_ttft_ms=500, sla_itl_ms=30
        ).planner_config
        parsed = PlannerConfig.model_validate(payload)
        assert parsed.mode == mode and parsed.enable_throughput_scaling and parsed.max_gpu_budget == 32


def test_an_unset_interval_is_left_out_of_the_planner_payload():
    policy = {
        "enable_throughput_scaling": True,
        "enable_load_scaling": False,
        "throughput_adjustment_interval_seconds": 30,
        "load_adjustment_interval_seconds": None,
    }
    sample = sample_for(DENSE, policy=policy)
    payload = build_deployment(
        sample, backend_version="x", optimization_target="sla", sla_ttft_ms=1, sla_itl_ms=1
    ).planner_config
    assert payload["throughput_adjustment_interval_seconds"] == 30 and "load_adjustment_interval_seconds" not in payload
