"""A whole fleet run (spica fleet): killed half-way, resumed, and its plan checked against the inventory.

Real parts throughout: each model's sweep is the real workflow (Vizier, Dynamo replays, perf DB), the
split is HiGHS, the confirming replays are Dynamo's. Kept small (two models, one round of two
candidates, no finish) so the whole test stays near a minute on a loaded 2-core machine.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import yaml

from spica_lib.base.artifacts import read_model
from spica_lib.fleet.layout import FleetRecord
from spica_lib.fleet.plan import FleetPlan

pytestmark = pytest.mark.slow

SWEEP = {"max_rounds": 1, "candidates_per_round": 2, "parallel_evals": 2, "top_k": 1, "finish_samples": 0,
         "stress_top": 0, "baselines": False, "capacity_top": 1}  # fmt: skip
SPACE = {"deployment_mode": ["agg"], "backend": ["vllm"], "router_mode": ["round_robin"],
         "planner_scaling_policy": ["disabled"]}  # fmt: skip


def fleet_model(name: str, model: str, rate: float, ttft_ms: float, itl_ms: float) -> dict:
    """One model of the fleet: its small sweep at `rate` requests/s, the cheapest deployment within its SLA for
    90 % of the requests."""
    return {"name": name, "search_space": {"model_name": model, **SPACE},
            "workload": {"isl": 256, "osl": 32, "request_rate": rate, "num_request_ratio": 5},
            "goal": {"target": "cost_per_million_output_tokens", "sla": {"ttft_ms": ttft_ms, "itl_ms": itl_ms},
                     "sla_coverage": 0.9},
            "sweep": SWEEP}  # fmt: skip


FLEET = {
    "inventory": {"h200_sxm": 2, "h100_sxm": 2},
    "gpu_hour_usd": {"h200_sxm": 3.5, "h100_sxm": 2.5},
    "headroom": 0.1,
    "models": [fleet_model("eight", "Qwen/Qwen3-8B", 4.0, 1000, 40),
               fleet_model("tiny", "Qwen/Qwen3-0.6B", 8.0, 500, 20)],
}
SPICA = [sys.executable, "-m", "spica_lib.cli"]


def working_in(folder: Path) -> list[int]:
    """PIDs of the processes whose working folder is `folder` or inside it."""
    found = []
    for process in psutil.process_iter(["pid"]):
        try:
            if Path(process.cwd()).resolve().is_relative_to(folder.resolve()) and process.pid != os.getpid():
                found.append(process.pid)
        except (psutil.NoSuchProcess, psutil.AccessDenied, FileNotFoundError):
            continue
    return found


def described(pids: list[int]) -> list[str]:
    """Each process's state and command line, for a failure message."""
    out = []
    for pid in pids:
        try:
            process = psutil.Process(pid)
            out.append(f"{pid} {process.status()} {' '.join(process.cmdline())[:300]}")
        except psutil.Error:
            out.append(f"{pid} gone")
    return out


def wait_gone(folder: Path, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while working_in(folder):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.5)
    return True


def test_a_fleet_run_killed_after_one_model_resumes_without_sweeping_it_again(tmp_path: Path) -> None:
    config = tmp_path / "fleet.yaml"
    config.write_text(yaml.safe_dump(FLEET), encoding="utf-8")
    command = [*SPICA, "fleet", str(config), "--run", "f"]
    fleet = tmp_path / "results" / "f"
    # Killed once the second model's sweep has begun: the first's job is then surely recorded as finished.
    # (Its first suggestions, not its config: a kill in the model's Snakemake start-up is another test's ground.)
    # Which model Snakemake sweeps first is its own choice (both jobs take every core): either order will do.
    models = [model["name"] for model in FLEET["models"]]

    def first_and_second() -> tuple[str, str] | None:
        for first, second in (models, models[::-1]):
            done = (fleet / "models" / first / "summary.json").is_file()
            if done and any((fleet / "models" / second).glob("rounds/*/0/suggestions.json")):
                return first, second
        return None

    process = subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               start_new_session=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 240
        while first_and_second() is None:
            assert process.poll() is None, process.stderr.read().decode()[-3000:]
            assert time.monotonic() < deadline, "the second model's sweep did not start"
            time.sleep(0.5)
    finally:
        os.kill(process.pid, signal.SIGKILL)  # spica fleet itself; its Snakemake is told to stop when it dies
        process.wait()
        process.stderr.close()
    first, _ = first_and_second()
    first_summary = fleet / "models" / first / "summary.json"
    swept_at = first_summary.stat().st_mtime_ns
    # The fleet's Snakemake, told to stop when spica fleet died, stops its model's sweep and then itself.
    assert wait_gone(tmp_path, 240), f"processes still working in {tmp_path}: {described(working_in(tmp_path))}"

    resumed = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    # The screen: the fleet's stages, then the plan; Snakemake's records are in the fleet's log (each invocation
    # under its header), each model sweep's in its own.
    said = resumed.stdout
    assert f"Sweeping model {first}" not in said  # its done marker stands: not swept again
    assert "s] Splitting the inventory" in said and "spica fleet done: 2 model(s)" in said
    assert "report: results/f/report.md" in said and "Finished job" not in said and len(said.splitlines()) < 20, said
    fleet_log = (fleet / "logs" / "snakemake.log").read_text(encoding="utf-8")
    killed_part = fleet_log.split("=== spica fleet f, started")[1]
    assert fleet_log.count("=== spica fleet f, started") == 2 and "Finished job" in fleet_log
    assert f"Sweeping model {first} (its own Snakemake; its log: results/f/models/{first}/logs/snakemake.log)" in killed_part
    model_log = (fleet / "models" / first / "logs" / "snakemake.log").read_text(encoding="utf-8")
    assert f"=== spica fleet, model {first}, started" in model_log and "Finished job" in model_log
    assert first_summary.stat().st_mtime_ns == swept_at

    plan = read_model(fleet / "fleet.json", FleetPlan)
    record = read_model(fleet / "fleet_config.json", FleetRecord)
    assert plan.feasible and {d.model for d in plan.deployments} == {"eight", "tiny"}
    for sku, count in plan.inventory.items():
        used = sum(d.gpus.get(sku, 0) for d in plan.deployments)
        assert used <= count and plan.inventory_left[sku] == count - used
    for d in plan.deployments:
        assert d.confirmed is not None and d.confirmed.holds  # every model met its SLA floor on the replays
        assert d.capacity_rps >= record.offered_rps[d.model] * (1 + record.headroom[d.model])
        # Kept, so that a plan job stopped half-way does not replay them again.
        assert (fleet / "confirm" / d.model / f"{d.key}x{d.replicas}.json").is_file()
    report = (fleet / "report.md").read_text(encoding="utf-8")
    assert "Against the naive split" in report
    assert not working_in(tmp_path)  # nothing of the run outlives it
    names = set()
    for d in plan.deployments:
        for replica in range(1, d.replicas + 1):
            deploy = yaml.safe_load_all((fleet / "deploy" / d.model / str(replica) / "k8s_deploy.yaml").read_text())
            names.add(next(deploy)["metadata"]["name"])
    assert len(names) == sum(d.replicas for d in plan.deployments)  # one namespace, no name twice
    assert all(name.startswith("spica-f-") for name in names)
