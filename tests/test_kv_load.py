"""kv_load_ratio -> concurrency, on hand-computed capacities and on the real estimator."""

import pytest
from conftest import build, config_data

from spica_lib.facts.kv_capacity import KvEstimate, KvEstimator
from spica_lib.facts.parallel import DisaggConfig, ParallelShape, ReplicaConfig
from spica_lib.trial.kv_load import InfeasibleKVCapacity, resolve_kv_load


class FixedKvEstimator:
    """Fake estimator (tests our arithmetic only): fixed tokens per rank per role shape."""

    def __init__(self, tokens_by_tp):
        self.tokens_by_tp, self.asked = tokens_by_tp, []

    def estimate(self, shape, backend, settings):
        self.asked.append(shape.tp)
        return KvEstimate(tokens_per_rank=self.tokens_by_tp.get(shape.tp))


def workload(isl=100, osl=100):
    return build(config_data(workload={"request_rate": None, "kv_load_ratio": 0.5, "isl": isl, "osl": osl})).workload


def sample(mode="agg", block=64):
    roles = ("agg",) if mode == "agg" else ("prefill", "decode")
    out = {"backend": "vllm", "aic_nextn": None}
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


@pytest.mark.slow
def test_real_estimator_gives_the_tp2_capacity():
    estimator = KvEstimator("Qwen/Qwen3-32B", "h200_sxm", {"vllm": "0.24.0"})
    load = resolve_kv_load(
        sample(), workload(1024, 256), ReplicaConfig(shape=ParallelShape(tp=2), replicas=2), 1.0, estimator
    )
    assert load.role_capacity_tokens["agg"] == (751_550 // 64 * 64) * 2
    assert load.concurrency == load.role_capacity_tokens["agg"] // (1024 + 128)
