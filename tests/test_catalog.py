"""Known hardware and models, checked against the real aiconfigurator files."""

import json

import pytest

from spica_lib.facts.catalog import bundled_models, check_catalog, resolve_backend_version, supported_databases

pytestmark = pytest.mark.slow


def test_h200_has_a_literal_version_for_every_backend():
    for backend in ("vllm", "sglang", "trtllm"):
        version = resolve_backend_version("h200_sxm", backend)
        assert version and version[0].isdigit()
        assert version in supported_databases()["h200_sxm"][backend]


def test_spec_only_system_has_no_perf_db():
    assert "h100_pcie" not in supported_databases()
    assert resolve_backend_version("h100_pcie", "vllm") is None


def test_bundled_models_include_the_examples():
    models = bundled_models()
    assert {"Qwen/Qwen3-32B", "Qwen/Qwen3-30B-A3B", "deepseek-ai/DeepSeek-V3"} <= set(models)
    assert not any(name.endswith("_hf_quant") for name in models)


def test_a_bundled_config_that_would_need_a_download_is_refused_up_front():
    # aiconfigurator 0.12.0 ships mistralai--Mixtral-8x7B-v0.1_config.json but loads it from the hub.
    assert "mistralai/Mixtral-8x7B-v0.1" not in bundled_models()
    _, problems = check_catalog("h200_sxm", "mistralai/Mixtral-8x7B-v0.1", ["vllm"])
    assert [path for path, _ in problems] == ["search_space.model_name"]


def test_known_pair_gives_facts():
    facts, problems = check_catalog("h200_sxm", "Qwen/Qwen3-32B", ["vllm", "sglang"])
    assert problems == []
    assert set(facts.perf_db_versions) == {"vllm", "sglang"} and all(facts.perf_db_versions.values())
    assert facts.model_source == "aiconfigurator"


def test_unknown_sku_lists_the_known_systems():
    _, problems = check_catalog("h900", "Qwen/Qwen3-32B", ["vllm"])
    assert problems[0][0] == "search_space.hardware_sku"
    assert "h200_sxm" in problems[0][1] and "'h900'" in problems[0][1]


def test_sku_without_a_db_for_any_configured_backend():
    # b60 has vLLM perf data only.
    _, problems = check_catalog("b60", "Qwen/Qwen3-32B", ["trtllm"])
    assert problems[0][0] == "search_space.backend" and "vllm" in problems[0][1]


def test_unknown_model_lists_the_known_models():
    _, problems = check_catalog("h200_sxm", "acme/NotAModel-7B", ["vllm"])
    assert problems[0][0] == "search_space.model_name" and "Qwen/Qwen3-32B" in problems[0][1]


def test_local_model_directory_with_config_json(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["Qwen3ForCausalLM"]}))
    facts, problems = check_catalog("h200_sxm", str(tmp_path), ["vllm"])
    assert problems == [] and facts.model_source == "local"


def test_the_perf_db_index_is_kept_on_disk_by_the_installed_package_and_rebuilt_when_unreadable(tmp_path, monkeypatch):
    from aiconfigurator_core.sdk import perf_database

    from spica_lib.facts import catalog

    monkeypatch.setenv(catalog.CACHE_VARIABLE, str(tmp_path))
    built = perf_database.get_supported_databases()
    catalog.supported_databases.cache_clear()
    try:
        assert catalog.supported_databases() == built  # built, then kept
        (kept,) = tmp_path.glob("*.json")
        assert json.loads(kept.read_text()) == built
        catalog.supported_databases.cache_clear()
        assert catalog.supported_databases() == built  # read back (a process of its own would read it here)
        kept.write_text("{half a file")
        catalog.supported_databases.cache_clear()
        assert catalog.supported_databases() == built and json.loads(kept.read_text()) == built  # rebuilt
        # A systems folder outside the installed package may change at any time: its index is not kept.
        monkeypatch.setattr(perf_database, "get_systems_paths", lambda: [*perf_database._SYSTEMS_PATHS, str(tmp_path)])
        assert catalog._index_path(perf_database.get_systems_paths()) is None
    finally:
        catalog.supported_databases.cache_clear()
