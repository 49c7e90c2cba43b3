"""Shared helpers: a minimal valid config to vary, and assertions on config problems."""

from __future__ import annotations

import copy
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
