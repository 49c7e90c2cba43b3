"""A hand-written candidate (for `spica evaluate`): mode, backend, layout and any knob values.

    deployment_mode: agg
    backend: vllm
    parallel: {tp: 2, replicas: 4}            # disagg: {prefill: {tp: 1, replicas: 2}, decode: {tp: 4}}
    agg_max_num_seqs: 512                      # any knob of the branch; omitted knobs take the
    router_mode: kv_router                     # config's first choice

Knob values are checked against the knob's allowed values (its rule in the knob table, config/knobs.py), so a typo
fails with the choices listed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from spica_lib.config import ConfigError, SmartSearchConfig
from spica_lib.config.knob_values import check_atomic_knob, check_composite_knob
from spica_lib.config.knobs import KNOBS, field_knob
from spica_lib.config.presets import COMPOSITE_KNOBS
from spica_lib.facts.parallel import ParallelConfig, parse_pinned_config
from spica_lib.pools.knobs import branch_knob_choices

MODE = KNOBS["deployment_mode"]
STRUCTURAL_KEYS = (MODE.name, KNOBS["backend"].name, "parallel", "kv_load_ratio")


def read_candidate(text_or_path: str) -> dict[str, Any]:
    """A candidate from a JSON/YAML file path, or inline JSON/YAML text."""
    path = Path(text_or_path)
    text = path.read_text(encoding="utf-8") if path.is_file() else text_or_path
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError([("candidate", f"not JSON or YAML: {exc}")], subject="candidate") from None
    if not isinstance(data, dict):
        raise ConfigError(
            [("candidate", f"must be a mapping or a path to one, got {text_or_path!r}")], subject="candidate"
        )
    return data


def candidate_selection(config: SmartSearchConfig, data: dict[str, Any]) -> tuple[dict[str, Any], ParallelConfig]:
    """Check a candidate against the config and return (selection, parallel config)."""
    space = config.search_space
    mode = data.get(MODE.name, space.deployment_mode[0])
    try:
        check_atomic_knob(MODE.name, [mode])
    except ValueError as exc:
        raise ConfigError([("candidate.deployment_mode", str(exc))], subject="candidate") from None
    if "parallel" not in data:
        raise ConfigError([("candidate.parallel", "give the layout, e.g. {tp: 2, replicas: 4}")], subject="candidate")
    choices = branch_knob_choices(space, mode)
    unknown = sorted(set(data) - set(choices) - set(STRUCTURAL_KEYS))
    if unknown:
        allowed = sorted({*STRUCTURAL_KEYS, *choices})
        raise ConfigError(
            [("candidate", f"unknown keys {unknown}; a {mode} candidate takes {allowed}")], subject="candidate"
        )
    selection: dict[str, Any] = {"deployment_mode": mode, "backend": data.get("backend", space.backend[0])}
    problems = []
    for knob, values in choices.items():
        selection[knob] = data.get(knob, values[0])
    for knob, value in selection.items():
        try:
            if knob in COMPOSITE_KNOBS:
                check_composite_knob(knob, [value])
            elif field_knob(knob) is not None:
                check_atomic_knob(knob, [value])
        except ValueError as exc:
            problems.append((f"candidate.{knob}", str(exc)))
    ratio = data.get("kv_load_ratio", config.workload.kv_load_ratio)
    if isinstance(ratio, list):
        problems.append(
            ("candidate.kv_load_ratio", f"the workload sweeps a range {ratio}; give one value for this candidate")
        )
    elif ratio is not None:
        selection["kv_load_ratio"] = float(ratio)
    try:
        parallel = parse_pinned_config(data["parallel"], mode)
    except (KeyError, TypeError, ValueError) as exc:
        problems.append(("candidate.parallel", f"not a {mode} layout: {exc}"))
        parallel = None
    if problems:
        raise ConfigError(problems, subject="candidate")
    return selection, parallel
