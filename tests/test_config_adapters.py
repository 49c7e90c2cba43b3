"""Upstream Spica's `adapters:` section, read as an alias of Spica's router and planner knobs (issue 68), and the
upstream example configs shipped under config/examples/upstream/, each validated and dry-run."""

from __future__ import annotations

import copy
import shutil
import subprocess
from typing import Any

import pytest
import yaml
from conftest import REPO, SPICA_RUN, write_yaml

from spica_lib.cli.main import main
from spica_lib.config import ConfigError, SmartSearchConfig
from spica_lib.config.validate import ValidatedConfig, build_validated_config, check_config, config_sha256

UPSTREAM = sorted((REPO / "config" / "examples" / "upstream").glob("*.yaml"))
SMART = REPO / "config" / "examples" / "upstream" / "smart_sweep.yaml"
ROUTER = "adapters.dynamo.router.search_space"
PLANNER = "adapters.dynamo.planner.search_space"


def smart() -> dict[str, Any]:
    return yaml.safe_load(SMART.read_text())


def test_both_upstream_examples_ship():
    assert [path.name for path in UPSTREAM] == ["glm5_disagg_pareto_frontier.yaml", "smart_sweep.yaml"]


@pytest.mark.parametrize("path", UPSTREAM, ids=lambda path: path.name)
def test_each_upstream_example_validates_and_dry_runs(path, tmp_path, capsys):
    assert main(["validate", str(path)]) == 0, capsys.readouterr().err
    assert ": valid" in capsys.readouterr().out
    shutil.copy(path, tmp_path / path.name)
    done = subprocess.run([*SPICA_RUN, path.name, "--cores", "1", "-n"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert "This was a dry-run" in done.stdout + done.stderr and not (tmp_path / "results").exists()


def test_the_adapters_are_spica_s_knobs_with_the_run_id_of_the_config_that_names_them_itself(tmp_path):
    aliased = SmartSearchConfig.from_yaml(SMART)
    assert aliased.search_space.router_mode == ["kv_router", "round_robin"]
    assert aliased.search_space.planner_scaling_policy == ["disabled", "throughput_180_5", "hybrid_180_5"]
    plain = smart()
    del plain["adapters"]
    plain["search_space"].update(router_mode=["kv_router", "round_robin"],
                                 planner_scaling_policy=["disabled", "throughput_180_5", "hybrid_180_5"])  # fmt: skip
    written = SmartSearchConfig.from_yaml(write_yaml(tmp_path, plain))
    assert written.adapters_alias is None
    assert aliased.model_dump(exclude={"adapters_alias"}) == written.model_dump(exclude={"adapters_alias"})
    assert config_sha256(aliased) == config_sha256(written)  # the same question, the same run


def test_validate_says_where_each_setting_came_from_and_config_json_keeps_it(capsys):
    assert main(["validate", str(SMART)]) == 0
    out = capsys.readouterr().out
    assert f"{ROUTER}.mode -> search_space.router_mode ['kv_router', 'round_robin']" in out
    assert (f"{PLANNER}.scaling_policy -> search_space.planner_scaling_policy ['disabled', 'throughput_180_5', "
            "'hybrid_180_5']") in out  # fmt: skip
    assert (f"{PLANNER} ['fpm_sampling', 'load_sensitivity', 'load_predictor_candidates'] (not given) -> Spica's "
            "defaults") in out  # fmt: skip
    validated = build_validated_config(SMART)
    again = ValidatedConfig.model_validate_json(validated.model_dump_json())  # config.json reads back, not re-aliased
    assert again.config.adapters_alias == validated.config.adapters_alias
    assert again.config.adapters_alias.origins["search_space.router_mode"] == f"{ROUTER}.mode"


def _with(**adapters: Any) -> dict[str, Any]:
    data = smart()
    data["adapters"] = copy.deepcopy(adapters)
    return data


GOOD_ROUTER = {"search_space": {"mode": ["kv_router"]}}
BAD = {
    "an adapter Spica does not read": (
        _with(**{"dynamo.kvbm": {"search_space": {}}}), "adapters.dynamo.kvbm", "an adapter Spica does not read"
    ),
    "another key of an adapter": (
        _with(**{"dynamo.router": {**GOOD_ROUTER, "hooks": []}}), "adapters.dynamo.router.hooks", "unknown key"
    ),
    "a dimension the adapter does not have": (
        _with(**{"dynamo.planner": {"search_space": {"kvbm_blocks": [1]}}}), f"{PLANNER}.kvbm_blocks",
        "not a dimension Spica reads",
    ),
    "a value that is not a list": (
        _with(**{"dynamo.router": {"search_space": {"mode": "kv_router"}}}), f"{ROUTER}.mode", "a list of values"
    ),
    "a planner policy Spica does not know": (
        _with(**{"dynamo.planner": {"search_space": {"scaling_policy": ["disabled", "hybrid_60_5"]}}}),
        f"{PLANNER}.scaling_policy", "entry 1: unknown preset 'hybrid_60_5'",
    ),
    "a router mode that is not one": (
        _with(**{"dynamo.router": {"search_space": {"mode": ["random"]}}}), f"{ROUTER}.mode", "'random' is not a valid"
    ),
    "the section not a mapping": ({**smart(), "adapters": ["dynamo.router"]}, "adapters", "a mapping of adapters"),
}  # fmt: skip


@pytest.mark.parametrize("case", BAD, ids=list(BAD))
def test_what_the_alias_cannot_read_is_refused_by_the_path_written(case, tmp_path):
    data, path, fragment = BAD[case]
    with pytest.raises(ConfigError) as caught:
        check_config(write_yaml(tmp_path, data))
    found = [message for where, message in caught.value.problems if where.split(" ")[0] == path]
    assert any(fragment in message for message in found), caught.value.problems


def test_a_dimension_given_in_both_places_and_every_other_problem_are_said_at_once(tmp_path):
    data = _with(**{"dynamo.router": GOOD_ROUTER, "dynamo.kvbm": {}})
    data["search_space"]["router_mode"] = ["round_robin"]
    data["workload"]["isl"] = -1
    with pytest.raises(ConfigError) as caught:
        check_config(write_yaml(tmp_path, data))
    assert dict(caught.value.problems) == {
        f"{ROUTER}.mode": "search_space.router_mode is given too: give the dimension in one place",
        "adapters.dynamo.kvbm": "an adapter Spica does not read; it reads ['dynamo.router', 'dynamo.planner'] as its "
        "own router and planner knobs",
        "workload.isl": "must be positive, got -1",
    }


def test_a_policy_the_goal_cannot_use_is_named_by_the_adapter_path(tmp_path):
    data = _with(**{"dynamo.planner": {"search_space": {"scaling_policy": ["throughput_180_5"]}}})
    data["goal"] = {"target": "throughput"}
    with pytest.raises(ConfigError) as caught:
        check_config(write_yaml(tmp_path, data))
    assert caught.value.problems[0][0] == f"{PLANNER}.scaling_policy (as search_space.planner_scaling_policy)"


def test_an_adapter_left_out_is_said_to_take_spica_s_defaults_and_the_alias_block_is_spica_s(tmp_path):
    config = SmartSearchConfig.from_yaml(write_yaml(tmp_path, _with(**{"dynamo.router": GOOD_ROUTER})))
    assert config.search_space.router_mode == ["kv_router"]
    defaults = ("adapters.dynamo.planner (not given) -> Spica's defaults of search_space ['planner_scaling_policy', "
                "'planner_fpm_sampling', 'planner_load_sensitivity', 'load_predictor_candidates']")
    assert defaults in config.adapters_alias.mapping
    assert SmartSearchConfig.from_yaml(REPO / "config" / "default.yaml").adapters_alias is None
    data = smart()
    data["adapters_alias"] = {"given": {}, "mapping": [], "origins": {}}
    with pytest.raises(ConfigError, match="Spica writes it"):
        SmartSearchConfig.from_yaml(write_yaml(tmp_path, data))
