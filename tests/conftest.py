"""Shared helpers: a minimal valid config to vary, and assertions on config problems."""

from __future__ import annotations

import copy
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from spica_lib.config import ConfigError, InputKind, SmartSearchConfig, read_input
from spica_lib.replay.request import WALL_CLOCK_METRICS  # noqa: F401 (the tests import it from here)

REPO = Path(__file__).resolve().parents[1]


def sweep_examples() -> list[Path]:
    """config/default.yaml and every example that is one sweep's config (as the library tells a document's kind)."""
    examples = sorted((REPO / "config" / "examples").glob("*.yaml"))
    singles = [p for p in examples if read_input(p)[0] is InputKind.SWEEP]
    return [REPO / "config" / "default.yaml", *singles]
TRACE = REPO / "data" / "traces" / "mooncake_synthetic_trace.jsonl"

BASE: dict[str, Any] = {
    "search_space": {"model_name": "Qwen/Qwen3-32B", "hardware_sku": "h200_sxm"},
    "workload": {"isl": 1024, "osl": 128, "request_rate": 4.0, "num_request_ratio": 10},
}


# The engine part of a selection, one value per searched engine knob of each mode: what most tests replay.
ENGINE_KNOBS = {
    "agg": {"agg_max_num_batched_tokens": 8192, "agg_max_num_seqs": 256},
    "disagg": {"prefill_max_num_batched_tokens": 8192, "prefill_max_num_seqs": 8,
               "decode_max_num_batched_tokens": 8192, "decode_max_num_seqs": 256},
}  # fmt: skip


def plain_selection(mode: str = "agg", **knobs: Any) -> dict[str, Any]:
    """A candidate's selection on vLLM with neither router nor planner to choose (round robin, no scaling), the
    engine knobs of ENGINE_KNOBS, and `knobs` over them."""
    return {"deployment_mode": mode, "backend": "vllm", **ENGINE_KNOBS[mode], "router_mode": "round_robin",
            "planner_scaling_policy": "disabled", **knobs}  # fmt: skip


@pytest.fixture(autouse=True)
def _trace_folders_restored():
    """Each test starts with the trace folders of a process outside any sweep: a job run in the test's own process
    (the host's tests) names its run's folders process-wide, as a job's process does, and they must not leak into
    the next test."""
    from spica_lib.traces.folders import TraceFolders, use_trace_folders

    before = use_trace_folders(TraceFolders())
    yield
    use_trace_folders(before)


def config_data(**sections: dict[str, Any]) -> dict[str, Any]:
    """A valid config dict with each given section's keys merged over the base (None deletes a key)."""
    data = copy.deepcopy(BASE)
    for name, values in sections.items():
        section = data.setdefault(name, {})
        for key, value in values.items():
            if value is None:
                section.pop(key, None)
            else:
                section[key] = value
    return data


def build(data: dict[str, Any], base_dir: Path | None = None) -> SmartSearchConfig:
    return SmartSearchConfig.from_mapping(data, base_dir=base_dir)


def rejected(data: dict[str, Any], path: str, *fragments: str) -> str:
    """Assert the config is rejected with a problem at `path` whose message holds every fragment."""
    with pytest.raises(ConfigError) as caught:
        build(data)
    for where, message in caught.value.problems:
        if where == path and all(f in message for f in fragments):
            return message
    raise AssertionError(f"no problem at {path!r} containing {fragments}; got {caught.value.problems}")


def search_only(data: dict[str, Any]) -> dict[str, Any]:
    """`data` without the work after the last round (finish, stress test, baselines): for the sweeps whose
    tests look only at the search's replay jobs, where each of those would be more replays to wait for."""
    data["sweep"].pop("finish_top", None)
    data["sweep"].update(finish_samples=0, stress_top=0, baselines=False)
    return data


def write_yaml(folder: Path, data: Any, name: str = "spica.yaml") -> Path:
    path = folder / name
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


SPICA_RUN = [sys.executable, "-m", "spica_lib.cli", "run"]


def sweep(folder: Path, data: dict[str, Any], *extra: str):
    """`spica run` of `data` in `folder`; (the run folder, the finished process)."""
    path = write_yaml(folder, data)
    done = subprocess.run(
        [*SPICA_RUN, str(path), *extra], cwd=folder, capture_output=True, text=True, check=False, timeout=900
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return next((folder / "results").iterdir()), done


def default_config(rounds: int = 2, per_round: int = 3) -> dict[str, Any]:
    data = yaml.safe_load((REPO / "config" / "default.yaml").read_text())
    data["sweep"].update(max_rounds=rounds, candidates_per_round=per_round)
    return data


@pytest.fixture(scope="session")
def default_run(tmp_path_factory):
    """One finished sweep of config/default.yaml as shipped (what `make run` runs, and what the README's tour
    shows), through `spica run` with its output captured: shared by every test that only reads it."""
    data = yaml.safe_load((REPO / "config" / "default.yaml").read_text())
    return sweep(tmp_path_factory.mktemp("default"), data)


def snakemake_log(run_dir: Path) -> str:
    """What Snakemake and its jobs wrote during the run's last `spica run` (its screen shows the progress view)."""
    return (run_dir / "logs" / "snakemake.log").read_text(encoding="utf-8")


# The SLURM tests (tests/test_slurm.py, tests/test_rehearsal.py) touch only the cluster .ci/slurm-up.sh made.


def cluster_state() -> str:
    if shutil.which("sinfo") is None:
        return "no sinfo on PATH"
    try:
        done = subprocess.run(["sinfo", "-h", "-N", "-o", "%T"], capture_output=True, text=True, timeout=5)
    except subprocess.TimeoutExpired:
        return "sinfo timed out (slurmctld down?)"
    return done.stdout.strip() or done.stderr.strip()


CI_CLUSTER = "spica-ci"  # the ClusterName .ci/slurm-up.sh writes


def cluster_name() -> str:
    try:
        done = subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    found = re.search(r"^ClusterName\s*=\s*(\S+)", done.stdout, re.MULTILINE)
    return found.group(1) if found else ""


def refusal(opted_in: bool, state: str, name: str) -> str | None:
    """Why these tests must not run here (they submit and scancel jobs), or None."""
    if not opted_in:
        return "SLURM tests run only with SPICA_REQUIRE_SLURM=1 (they submit and cancel jobs)"
    if state.split("\n")[0] not in ("idle", "mixed", "allocated"):
        return f"no SLURM cluster here ({state}); start one with .ci/slurm-up.sh (root, Debian)"
    if name != CI_CLUSTER:
        return f"cluster {name!r} is not the {CI_CLUSTER!r} of .ci/slurm-up.sh: not touching its jobs"
    return None


@pytest.fixture(scope="module")
def cluster():
    """The one-node cluster of .ci/slurm-up.sh, or a skip (a failure when SPICA_REQUIRE_SLURM=1) saying why not."""
    opted_in = os.environ.get("SPICA_REQUIRE_SLURM") == "1"
    state = cluster_state()
    message = refusal(opted_in, state, cluster_name() if opted_in and shutil.which("scontrol") else "")
    if message and opted_in:
        pytest.fail(message)
    if message:
        pytest.skip(message)
