"""`spica validate` and `spica schema`: output and exit codes."""

import json
import shutil
import subprocess
import sys

import pytest
from conftest import REPO, config_data, write_yaml

from spica_lib.cli.main import main
from spica_lib.config import ConfigError

pytestmark = pytest.mark.slow


def test_validate_prints_a_summary_and_exits_0(capsys):
    assert main(["validate", str(REPO / "config" / "default.yaml")]) == 0
    out = capsys.readouterr().out
    assert "valid — run id" in out
    assert "Qwen/Qwen3-32B on h200_sxm, at most 8 GPUs" in out
    assert "vllm (perf DB" in out and "sglang (perf DB" in out
    assert "agg" in out and "disagg" in out and "knob combinations" in out
    assert "memory-feasible layouts (vllm" in out
    assert "limits     120 s per trial (240 requests per replay); stopped early when certain to stay below the " in out
    assert "sweep's top scores; paced by the first 20% of the requests" in out
    assert "round 0 warm-started from the static estimate" in out


def test_validate_shows_the_kv_load_range_of_a_pareto_study(capsys):
    assert main(["validate", str(REPO / "config" / "examples" / "pareto_kv_load.yaml")]) == 0
    assert "kv_load_ratio (continuous 0.1 to 1.0)" in capsys.readouterr().out


def test_validate_shows_the_sla_as_it_will_be_applied(capsys):
    assert main(["validate", str(REPO / "config" / "examples" / "p99_sla.yaml")]) == 0
    assert "SLA p99_ttft_ms ≤ 1500 ms, p99_itl_ms ≤ 150 ms (a hard constraint" in capsys.readouterr().out
    assert main(["validate", str(REPO / "config" / "default.yaml")]) == 0
    assert "SLA mean_ttft_ms ≤ 2000 ms, mean_itl_ms ≤ 50 ms (goodput per request" in capsys.readouterr().out


def test_invalid_config_exits_2_with_the_field(tmp_path, capsys):
    path = write_yaml(tmp_path, config_data(search_space={"backend": ["tgi"]}))
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert "invalid config" in err and "search_space.backend" in err and "'tgi'" in err


def test_a_config_that_cannot_fit_exits_2_naming_the_mode_and_backend(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    too_small = {"model_name": "deepseek-ai/DeepSeek-V3", "backend": ["sglang"], "gpu_budget": 2}
    path = write_yaml(tmp_path, config_data(search_space=too_small))
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert "search_space.deployment_mode: 'agg' has no viable layout" in err
    assert "search_space.deployment_mode: 'disagg' has no viable layout" in err
    assert "search_space.backend: 'sglang'" in err and "GiB" in err
    assert main(["run", str(path)]) == 2  # refused while the workflow is parsed, before any job runs
    assert not (tmp_path / "results").exists()


def test_malformed_yaml_exits_2(tmp_path, capsys):
    path = tmp_path / "bad.yaml"
    path.write_text("goal: {target: [\n")
    assert main(["validate", str(path)]) == 2
    assert "malformed YAML" in capsys.readouterr().err


def test_missing_file_exits_2(capsys):
    assert main(["validate", "/nonexistent.yaml"]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_schema_is_json_schema(capsys):
    assert main(["schema"]) == 0
    schema = json.loads(capsys.readouterr().out)
    assert "search_space" in schema["properties"] and "$defs" in schema


def test_schema_markdown_is_the_config_reference_with_every_field_and_its_real_default(capsys):
    """The site's reference page (make docs) lists each section's every field, a factory's default included."""
    from spica_lib.config import SmartSearchConfig
    from spica_lib.config.reference import SECTIONS, _model

    assert main(["schema", "--markdown"]) == 0
    page = capsys.readouterr().out
    assert page.startswith("# Config reference")
    for section in SECTIONS:
        assert f"## `{section}`" in page
        for name in _model(SmartSearchConfig.model_fields[section].annotation).model_fields:
            assert f"| `{name}` |" in page, f"{section}.{name} is missing from the reference"
    assert '| `deployment_mode` | list of one of `disagg`, `agg` | `["disagg", "agg"]` |' in page
    assert '| `model_name` | string | required |' in page
    # The page is committed, so links to it work where the repository is read (its forge), not only on the built
    # site: it must be what the models say now.
    committed = (REPO / "docs" / "reference" / "config.md").read_text(encoding="utf-8")
    assert committed == page, "docs/reference/config.md is stale: `make docs`, or spica schema --markdown > it"


def test_console_script_is_installed():
    spica = shutil.which("spica") or str(REPO / ".venv" / "bin" / "spica")
    done = subprocess.run([spica, "--help"], capture_output=True, text=True, check=False, timeout=60)
    assert done.returncode == 0 and "validate" in done.stdout
    # `python -m spica_lib.cli` reaches every command (evaluate once died there with a NameError).
    for command in (["validate"], ["evaluate", "--candidate", "{}"]):
        done = subprocess.run(
            [sys.executable, "-m", "spica_lib.cli", *command, "/nonexistent.yaml"],
            capture_output=True,
            text=True,
            check=False,
            timeout=120,
        )
        assert done.returncode == 2 and "does not exist" in done.stderr, done.stderr


def test_run_keeps_its_own_options_after_the_config_and_passes_only_what_follows_a_lone_dash_dash(monkeypatch):
    import spica_lib.run.launcher

    calls = []
    monkeypatch.setattr(spica_lib.run.launcher, "run_sweep", lambda config, **kw: calls.append((config, kw)) or 0)
    assert main(["run", "c.yaml", "--profile", "profiles/slurm", "--", "--dry-run", "--retries", "1"]) == 0
    assert main(["run", "c.yaml"]) == 0
    assert calls == [
        ("c.yaml", {"cores": None, "profile": "profiles/slurm", "run": None, "extra": ["--dry-run", "--retries", "1"],
                    "verbose": False}),
        ("c.yaml", {"cores": 2, "profile": None, "run": None, "extra": [], "verbose": False}),
    ]


def test_arguments_for_snakemake_are_refused_outside_run(capsys):
    with pytest.raises(SystemExit):
        main(["validate", "c.yaml", "--", "--dry-run"])
    assert "only for `spica run`" in capsys.readouterr().err


def test_only_one_spica_run_at_a_time_checks_and_clears_the_stale_lock(tmp_path, monkeypatch, capsys):
    import fcntl

    from spica_lib.run import launcher

    monkeypatch.chdir(tmp_path)
    unlocked = []
    monkeypatch.setattr(launcher, "has_lock", lambda directory: True)
    monkeypatch.setattr(launcher, "other_snakemake_here", lambda directory: [])
    monkeypatch.setattr(launcher.subprocess, "run", lambda command, **kw: unlocked.append(command))
    monkeypatch.setattr(launcher, "run_forwarding_signals", lambda command: 0)
    guard = tmp_path / ".snakemake" / "spica-unlock.lock"
    guard.parent.mkdir()
    with open(guard, "a") as held:  # another spica run is between its check and its unlock
        fcntl.flock(held, fcntl.LOCK_EX)
        with launcher.unlock_guard(tmp_path, wait_seconds=0.3) as guarded:
            assert not guarded
        monkeypatch.setattr(launcher, "UNLOCK_WAIT_SECONDS", 0.3)
        # (dry runs: the lock is checked before anything else, and c.yaml need not exist for it)
        assert launcher.run_sweep("c.yaml", extra=["--dry-run"]) == 1 and unlocked == []
        assert "another spica run is checking the lock" in capsys.readouterr().err
    assert launcher.run_sweep("c.yaml", extra=["--dry-run"]) == 0 and len(unlocked) == 1  # released: cleared


def test_validate_warns_when_a_percentile_sla_has_too_few_requests_and_says_the_finish(tmp_path, capsys):
    sla = {"ttft_ms": 1500, "itl_ms": 150, "percentile": 99}
    path = write_yaml(tmp_path, config_data(goal={"target": "throughput", "sla": sla}))  # 40 requests per replay
    assert main(["validate", str(path)]) == 0
    out = capsys.readouterr().out
    assert "warning    goal.sla.percentile 99 on 40 requests per replay" in out and "at least 1000 requests" in out
    assert "finish     the top 4 distinct deployments on 4 to 16 fresh arrival samples each (sequential)" in out
    assert "arrival sample 42" in out
    assert main(["validate", str(REPO / "config" / "examples" / "p99_sla.yaml")]) == 0
    assert "warning" not in capsys.readouterr().out  # the shipped example replays 1000 requests


def test_spica_run_dry_run_plans_the_sweep_and_runs_nothing(tmp_path):
    # `make dry-run` is `spica run CONFIG --cores 2 -n`.
    shutil.copy(REPO / "config" / "default.yaml", tmp_path / "default.yaml")
    done = subprocess.run(
        [sys.executable, "-m", "spica_lib.cli", "run", "default.yaml", "--cores", "2", "-n"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert "This was a dry-run" in done.stdout + done.stderr and "finish" in done.stdout + done.stderr
    assert not (tmp_path / "results").exists()


@pytest.mark.parametrize(
    "example", sorted((REPO / "config" / "examples").glob("*.yaml")), ids=lambda p: p.name
)
def test_every_shipped_example_passes_spica_validate_whatever_its_kind(example, capsys):
    assert main(["validate", str(example)]) == 0, capsys.readouterr().err
    assert ": valid" in capsys.readouterr().out


def test_validate_tells_a_fleet_config_by_its_models_and_checks_it_as_a_fleet(capsys):
    assert main(["validate", str(REPO / "config" / "examples" / "fleet_models.yaml")]) == 0
    out = capsys.readouterr().out
    assert "valid fleet config — 3 model(s) on 4 x h200_sxm, 8 x h100_sxm" in out
    assert "chat-32b" in out and "Qwen/Qwen3-32B" in out and "req/s offered" in out


def test_spica_run_hands_a_fleet_config_to_the_fleet_and_a_sweep_config_to_the_sweep(monkeypatch):
    import spica_lib.fleet.launch
    import spica_lib.run.launcher

    fleets, sweeps = [], []
    monkeypatch.setattr(spica_lib.fleet.launch, "run_fleet", lambda config, **kw: fleets.append(config) or 0)
    monkeypatch.setattr(spica_lib.run.launcher, "run_sweep", lambda config, **kw: sweeps.append(config) or 0)
    fleet, single = str(REPO / "config" / "examples" / "fleet_models.yaml"), str(REPO / "config" / "default.yaml")
    assert main(["run", fleet, "-n"]) == 0 and main(["run", single, "-n"]) == 0
    assert (fleets, sweeps) == ([fleet], [single])


def test_a_document_at_the_wrong_door_is_told_which_door_takes_it_in_one_line(tmp_path, capsys):
    from spica_lib.config import SmartSearchConfig
    from spica_lib.fleet.config import load_fleet_config

    with pytest.raises(ConfigError, match=r"this is a fleet config .* `spica fleet FILE`") as fleet:
        SmartSearchConfig.from_yaml(REPO / "config" / "examples" / "fleet_models.yaml")
    with pytest.raises(ConfigError, match=r"this is one sweep's config .*`spica run FILE`") as single:
        load_fleet_config(REPO / "config" / "default.yaml")
    assert len(fleet.value.problems) == len(single.value.problems) == 1
    dgdr = write_yaml(tmp_path, {"apiVersion": "nvidia.com/v1beta1", "kind": "DynamoGraphDeploymentRequest", "spec": {}})
    assert main(["validate", str(dgdr)]) == 2
    assert "DynamoGraphDeploymentRequest" in capsys.readouterr().err
    other = write_yaml(tmp_path, {"apiVersion": "v1", "kind": "ConfigMap"}, "cm.yaml")
    assert main(["validate", str(other)]) == 2
    assert "'ConfigMap' is a Kubernetes kind Spica does not read" in capsys.readouterr().err
