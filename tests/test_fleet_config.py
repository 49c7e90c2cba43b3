"""The fleet config's gate (spica_lib/fleet/config.py): every refusal happens before any replay."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from spica_lib.config import ConfigError, SmartSearchConfig
from spica_lib.config.validate import config_sha256
from spica_lib.fleet.config import load_fleet_config, write_model_config

SLA = {"target": "cost_per_million_output_tokens", "sla": {"ttft_ms": 2000, "itl_ms": 50}, "sla_coverage": 0.95}
SWEEP = {"max_rounds": 2, "candidates_per_round": 2, "parallel_evals": 2}
FLEET: dict[str, Any] = {
    "inventory": {"h200_sxm": 4, "h100_sxm": 8},
    "gpu_hour_usd": {"h200_sxm": 3.5, "h100_sxm": 2.5},
    "goal": "min_cost",
    "headroom": 0.2,
    "models": [
        {
            "name": "chat-32b",
            "search_space": {"model_name": "Qwen/Qwen3-32B", "deployment_mode": ["agg"], "backend": ["vllm"]},
            "workload": {"isl": 1024, "osl": 128, "request_rate": 4.0, "num_request_ratio": 20},
            "goal": SLA,
            "sweep": SWEEP,
        },
        {
            "name": "small-8b",
            "headroom": 0.5,
            "search_space": {"model_name": "Qwen/Qwen3-8B", "deployment_mode": ["agg"], "backend": ["vllm"]},
            "workload": {"isl": 512, "osl": 128, "request_rate": 8.0, "num_request_ratio": 20},
            "goal": SLA,
            "sweep": SWEEP,
        },
    ],
}


def write(tmp_path: Path, data: dict[str, Any]) -> Path:
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def problems(tmp_path: Path, change) -> list[tuple[str, str]]:  # noqa: ANN001
    data = copy.deepcopy(FLEET)
    change(data)
    with pytest.raises(ConfigError) as caught:
        load_fleet_config(write(tmp_path, data))
    return caught.value.problems


def test_a_good_fleet_gives_each_model_the_whole_inventory_and_its_prices(tmp_path: Path) -> None:
    fleet, plans = load_fleet_config(write(tmp_path, FLEET))
    assert [p.name for p in plans] == ["chat-32b", "small-8b"]
    assert [p.headroom for p in plans] == [0.2, 0.5]  # the fleet's, and the model's own
    assert [p.offered_rps for p in plans] == [4.0, 8.0]
    for plan in plans:
        assert plan.config.search_space.hardware == fleet.inventory
        assert plan.config.goal.gpu_hour_usd == fleet.gpu_hour_usd
        assert plan.config.sweep.capacity_top == 3  # the split needs capacities
        assert sum(plan.smallest_gpus.values()) >= 1


def test_a_model_config_written_for_its_run_reads_back_as_the_same_run(tmp_path: Path) -> None:
    _, plans = load_fleet_config(write(tmp_path, FLEET))
    for plan in plans:
        write_model_config(plan.config, tmp_path / f"{plan.name}.yaml")
        again = SmartSearchConfig.from_yaml(tmp_path / f"{plan.name}.yaml")
        assert config_sha256(again) == config_sha256(plan.config)


def test_an_unknown_model_is_named_with_its_place(tmp_path: Path) -> None:
    found = problems(tmp_path, lambda d: d["models"][1]["search_space"].update(model_name="Qwen/Nope-9B"))
    assert found[0][0] == "models[1] (small-8b).search_space.model_name"
    assert "Qwen/Nope-9B" in found[0][1]


def test_missing_prices_are_refused(tmp_path: Path) -> None:
    found = problems(tmp_path, lambda d: d.update(gpu_hour_usd={"h200_sxm": 3.5}))
    assert "h100_sxm" in found[0][1] and "price" in found[0][1]


def test_a_model_may_not_bring_its_own_hardware_or_prices(tmp_path: Path) -> None:
    found = problems(tmp_path, lambda d: d["models"][0]["goal"].update(gpu_hour_usd=3.0))
    assert "goal.gpu_hour_usd is the fleet's" in found[0][1]


def test_an_inventory_too_small_for_a_model_says_the_shortfall(tmp_path: Path) -> None:
    def tiny(d: dict[str, Any]) -> None:
        d.update(inventory={"h100_sxm": 1}, gpu_hour_usd={"h100_sxm": 2.5})
        d["models"] = d["models"][:1]  # Qwen3-32B needs two H100 per worker

    found = problems(tmp_path, tiny)
    assert len(found) == 1
    path, message = found[0]
    assert path == "models[0] (chat-32b).search_space.deployment_mode"
    assert "short by 1 x h100_sxm" in message and "2 GPUs" in message


def test_an_inventory_that_holds_each_model_but_not_all_together_is_refused(tmp_path: Path) -> None:
    found = problems(tmp_path, lambda d: d.update(inventory={"h200_sxm": 1}, gpu_hour_usd={"h200_sxm": 3.5}))
    assert found[0][0] == "inventory" and "together 2 GPUs against 1" in found[0][1]


def test_a_model_without_a_capacity_to_size_is_refused_in_the_splits_words(tmp_path: Path) -> None:
    found = problems(tmp_path, lambda d: d["models"][0].update(goal={"target": "throughput"}))
    assert found[0][0] == "models[0] (chat-32b)"
    assert "capacity within its SLA" in found[0][1] and "capacity_top" not in found[0][1]


def test_a_closed_loop_workload_is_refused(tmp_path: Path) -> None:
    closed = {"isl": 512, "osl": 64, "concurrency": 4, "num_request_ratio": 10}
    found = problems(tmp_path, lambda d: d["models"][1].update(workload=closed))
    assert found[0][0] == "models[1] (small-8b)" and "closed-loop" in found[0][1]


def test_capacity_top_zero_is_refused(tmp_path: Path) -> None:
    found = problems(tmp_path, lambda d: d["models"][0]["sweep"].update(capacity_top=0))
    assert "capacity_top 0" in found[0][1]


def test_repeated_model_names_are_refused(tmp_path: Path) -> None:
    found = problems(tmp_path, lambda d: d["models"][1].update(name="chat-32b"))
    assert "repeated" in found[0][1]


def test_the_fleet_example_passes_the_gate() -> None:
    from conftest import REPO

    fleet, plans = load_fleet_config(REPO / "config" / "examples" / "fleet_models.yaml")
    assert len(plans) == 3 and len(fleet.inventory) == 2
    assert [p.headroom for p in plans] == [0.2, 0.3, 0.2]


def test_spica_fleet_refuses_a_bad_fleet_before_anything_runs(tmp_path: Path, monkeypatch, capsys) -> None:  # noqa: ANN001
    from spica_lib.cli.main import main

    data = copy.deepcopy(FLEET)
    data["gpu_hour_usd"] = {"h200_sxm": 3.5}
    path = write(tmp_path, data)
    monkeypatch.chdir(tmp_path)
    assert main(["fleet", str(path)]) == 2
    assert "h100_sxm" in capsys.readouterr().err
    assert not (tmp_path / "results").exists() and not (tmp_path / ".snakemake").exists()
