"""kv_load_ratio -> concurrency, on hand-computed capacities and on the real estimator."""

import pytest
from conftest import build, config_data

from spica_lib.facts.kv_capacity import KvBlocks, KvEstimator, KvSettings
from spica_lib.facts.parallel import DisaggConfig, ParallelShape, ReplicaConfig
from spica_lib.trial.kv_load import InfeasibleKVCapacity, resolve_kv_load


class FixedKvEstimator:
    """Fake estimator (tests our arithmetic only): fixed cache tokens per rank per role shape."""

    def __init__(self, tokens_by_tp):
        self.tokens_by_tp, self.asked = tokens_by_tp, []

    def gpu_blocks(self, shape, backend, settings, block_size):
        self.asked.append(shape.tp)
        tokens = self.tokens_by_tp.get(shape.tp)
        return KvBlocks(blocks_per_rank=None if tokens is None else tokens // block_size, reason="fake")


def workload(isl=100, osl=100):
    return build(config_data(workload={"request_rate": None, "kv_load_ratio": 0.5, "isl": isl, "osl": osl})).workload


def sample(mode="agg", block=64):
    roles = ("agg",) if mode == "agg" else ("prefill", "decode")
    out = {"backend": "vllm"}
    for role in roles:
        out.update(
            {
                f"{role}_block_size": block,
                f"{role}_max_num_batched_tokens": 8192,
                f"{role}_max_num_seqs": 256,
                f"{role}_gpu_memory_utilization": 0.9,
            }
        )
    return out


AGG = ReplicaConfig(shape=ParallelShape(tp=2, attention_dp=2, moe_ep=4), replicas=3)


def test_agg_capacity_uses_whole_blocks_dp_ranks_and_replicas():
    load = resolve_kv_load(sample(), workload(), AGG, 0.5, FixedKvEstimator({2: 10_000}))
    assert load.role_capacity_tokens == {"agg": 59_904}  # floor(10000/64)*64 * dp 2 * replicas 3
    assert load.concurrency_capacity == 399 and load.concurrency == 199  # 59904 // (100 + 100 // 2)


def test_disagg_estimates_both_roles_and_loads_decode():
    pair = DisaggConfig(
        prefill=ReplicaConfig(shape=ParallelShape(tp=1)), decode=ReplicaConfig(shape=ParallelShape(tp=2))
    )
    fake = FixedKvEstimator({1: 1_000_000, 2: 300_000})
    load = resolve_kv_load(sample("disagg", block=1), workload(1000, 1000), pair, 1.0, fake)
    assert fake.asked == [1, 2] and load.load_role == "decode"
    assert load.concurrency_capacity == 200  # 300000 // 1500


def test_ratio_zero_still_runs_one_request():
    assert resolve_kv_load(sample(), workload(), AGG, 0.0, FixedKvEstimator({2: 10_000})).concurrency == 1


def test_capacity_below_one_request():
    with pytest.raises(InfeasibleKVCapacity, match="cannot hold"):
        resolve_kv_load(
            sample(), workload(100_000, 10), ReplicaConfig(shape=ParallelShape(tp=2)), 0.5, FixedKvEstimator({2: 1000})
        )


def test_no_kv_budget_is_infeasible():
    with pytest.raises(InfeasibleKVCapacity, match="no KV budget"):
        resolve_kv_load(sample(), workload(), AGG, 0.5, FixedKvEstimator({}))


def test_block_size_must_be_positive():
    with pytest.raises(ValueError, match="agg_block_size must be greater than zero"):
        resolve_kv_load(sample(block=0), workload(), AGG, 0.5, FixedKvEstimator({2: 10_000}))


@pytest.mark.parametrize(
    "backend, shape",
    [("vllm", ParallelShape(tp=2)), ("sglang", ParallelShape(tp=1)), ("trtllm", ParallelShape(tp=4))],
)
def test_block_count_is_the_one_dynamos_mocker_computes(backend, shape):
    from dynamo._internal.aic import estimate_num_gpu_blocks as mocker_estimate  # the replay's own sizing

    version = catalog_version(backend)
    settings = KvSettings(max_num_tokens=4096, memory_fraction=0.8)
    ours = KvEstimator(MODEL, SKU, {backend: version}).gpu_blocks(shape, backend, settings, 32).blocks_per_rank
    fraction = {"gpu_memory_utilization": 0.8, "mem_fraction_static": 0.8, "free_gpu_memory_fraction": 0.8}
    assert ours == mocker_estimate(backend, SKU, MODEL, shape.tp, 32, 4096, backend_version=version, **fraction)


@pytest.mark.slow
def test_replay_simulates_exactly_the_cache_the_load_is_sized_against():
    """A replay told our block count behaves as one left to size its own cache; half the count does not."""
    from spica_lib.replay.call import execute_call

    version = catalog_version("vllm")
    settings = KvSettings(max_num_tokens=8192, memory_fraction=0.8)
    blocks = KvEstimator(MODEL, SKU, {"vllm": version}).gpu_blocks(ParallelShape(tp=1), "vllm", settings, 64)
    engine = {
        "engine_type": "vllm",
        "worker_type": "aggregated",
        "aic_backend": "vllm",
        "aic_backend_version": version,
        "aic_system": SKU,
        "aic_model_path": MODEL,
        "aic_tp_size": 1,
        "aic_attention_dp_size": 1,
        "max_num_batched_tokens": 8192,
        "max_num_seqs": 1024,
        "block_size": 64,
        "gpu_memory_utilization": 0.8,
        "enable_prefix_caching": False,
    }

    def mean_ttft(**count):
        call = {
            "function": "synthetic",
            "args": [],
            "kwargs": {"input_tokens": 6000, "output_tokens": 100, "request_count": 150, "num_workers": 1},
            "load": {"replay_concurrency": 120},
            "engines": {"extra_engine_args": {**engine, **count}},
            "router_config": None,
        }
        return execute_call(call)["metrics"]["mean_ttft_ms"]

    own_sizing = mean_ttft()
    assert mean_ttft(num_gpu_blocks=blocks.blocks_per_rank) == own_sizing
    assert mean_ttft(num_gpu_blocks=blocks.blocks_per_rank // 2) != own_sizing


def catalog_version(backend):
    from spica_lib.facts.catalog import resolve_backend_version

    return resolve_backend_version(SKU, backend)


MODEL, SKU = "Qwen/Qwen3-32B", "h200_sxm"
