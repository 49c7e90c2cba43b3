"""A trial result never holds a number JSON cannot store: non-finite metrics make a failed trial.

The replay reports are fabricated here (`fake_outcome`): this tests our scoring of a report, not Dynamo.
"""

import math

import pydantic
import pytest
from conftest import build, config_data, plain_selection

from spica_lib.facts.parallel import ParallelShape, ReplicaConfig
from spica_lib.replay.worker import ChildOutcome
from spica_lib.trial.evaluate import prepare_trial, score_replay
from spica_lib.trial.spec import TrialRecord, TrialResult

GOOD = {"output_throughput_tok_s": 500.0, "gpu_hours": 0.01, "duration_ms": 9000.0, "mean_e2e_latency_ms": 800.0}


def spec(goal):
    data = config_data()
    data["goal"] = goal
    layout = ReplicaConfig(shape=ParallelShape(tp=2), replicas=2)
    return prepare_trial(build(data), plain_selection(), layout, backend_version="0.24.0")


def fake_outcome(metrics):
    report = {"ok": True, "outcome": {"metrics": metrics, "scaling_events": [], "replay_seconds": 0.1}}
    return ChildOutcome(key="k", status="ok", reason=None, report=report, wall_seconds=0.2, cpu_seconds=0.1)


def test_a_non_finite_metric_makes_a_failed_trial_whose_file_loads_again():
    trial = spec({"target": "throughput"})
    result = score_replay(trial, fake_outcome({**GOOD, "mean_ttft_ms": math.nan, "p99_itl_ms": math.inf}))
    assert result.status == "failed" and "['mean_ttft_ms', 'p99_itl_ms']" in result.reason
    record = TrialRecord(key=trial.key(), spec=trial, result=result)
    assert TrialRecord.model_validate_json(record.model_dump_json()) == record


def test_a_score_that_is_not_finite_is_a_failed_trial():
    metrics = {k: v for k, v in GOOD.items() if k != "mean_e2e_latency_ms"}  # latency goal, no latency
    result = score_replay(spec({"target": "e2e_latency"}), fake_outcome(metrics))
    assert result.status == "failed" and "not finite" in result.reason and result.score is None
    assert score_replay(spec({"target": "e2e_latency"}), fake_outcome(GOOD)).score == -800.0


def test_the_result_model_refuses_non_finite_numbers():
    with pytest.raises(pydantic.ValidationError):
        TrialResult(status="feasible", score=-math.inf, used_gpus=1)
