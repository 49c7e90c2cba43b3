"""Deployment files checked like a cluster would: v1beta1 structure, names, images, GPUs and every replayed setting.

Trial records are constructed for every mode and backend (TRT-LLM included), with round robin or the
KV router and with no planner, a load planner or an SLA planner; each is written as `deploy/<rank>/`
by the real generator, read back from disk, and checked against the trial itself. The values are
read with the parts a cluster would use: ai-dynamo 1.5.1's frontend parser, its PlannerConfig, its
planner's own component lookup, the kubernetes client's models.
"""

import json
import re
from importlib import metadata

import pytest
import yaml
from conftest import build, config_data

from spica_lib.deploy.bench_job import AIPERF, frontend_url
from spica_lib.deploy.dgd import GPU, components_by_role, main_container
from spica_lib.deploy.k8s_check import document_problems
from spica_lib.deploy.k8s_names import DEFAULT_NAMESPACE, check_namespace, deployment_name, name_problems
from spica_lib.deploy.release import installed_release
from spica_lib.deploy.replayed import replayed
from spica_lib.deploy.settings import deployed_engine, differences, frontend_config, planner_config
from spica_lib.deploy.top import BENCH_FILE, DGD_FILE, DeploymentFiles, write_deployment
from spica_lib.facts.parallel import DisaggConfig, ParallelShape, ReplicaConfig
from spica_lib.trial.evaluate import prepare_trial
from spica_lib.trial.spec import TrialRecord, TrialResult

pytestmark = pytest.mark.slow

VERSION = {"vllm": "0.24.0", "sglang": "0.5.14", "trtllm": "1.2.0rc6"}
SLA_GOAL = {"target": "goodput_per_gpu", "sla": {"ttft_ms": 2000, "itl_ms": 50}}
AGG = ReplicaConfig(shape=ParallelShape(tp=2), replicas=3)
PAIR = DisaggConfig(
    prefill=ReplicaConfig(shape=ParallelShape(tp=1), replicas=2), decode=ReplicaConfig(shape=ParallelShape(tp=2))
)
VARIANTS = {
    "round_robin": {},
    "kv_router+load_planner": {"router": "kv_router", "policy": "load_180_5"},
    "kv_router+sla_planner": {"router": "kv_router", "policy": "hybrid_180_5", "goal": SLA_GOAL},
}


def trial_record(mode="agg", backend="vllm", router="round_robin", policy="disabled", layout=None, goal=None,
                 workload=None, knobs=None, **space):  # fmt: skip
    data = config_data(search_space={"backend": [backend], **space}, workload=workload or {})
    if goal:
        data["goal"] = goal
    config = build(data)
    selection = {"deployment_mode": mode, "backend": backend, "router_mode": router, "planner_scaling_policy": policy,
                 "planner_fpm_sampling": "default", "planner_load_sensitivity": "default"}  # fmt: skip
    if mode == "agg":
        selection.update(agg_max_num_batched_tokens=4096, agg_max_num_seqs=128)
    else:
        selection.update(prefill_max_num_batched_tokens=16384, prefill_max_num_seqs=8,
                         decode_max_num_batched_tokens=2048, decode_max_num_seqs=256)  # fmt: skip
    if router == "kv_router":
        selection.update(overlap_score_credit=0.5, prefill_load_scale=0.75, router_temperature=0.1)
    selection.update(knobs or {})
    layout = layout or (AGG if mode == "agg" else PAIR)
    spec = prepare_trial(config, selection, layout, backend_version=VERSION[backend])
    result = TrialResult(status="feasible", score=1.0, used_gpus=spec.used_gpus)
    return config, TrialRecord(key=spec.key(), spec=spec, result=result)


def written(tmp_path, record, config, rank=1, run="c0ffee123456", namespace=DEFAULT_NAMESPACE):
    folder = tmp_path / str(rank)
    files = write_deployment(folder, rank, record, config, run=run, namespace=namespace)
    assert files.error is None, files.error
    documents = list(yaml.safe_load_all((folder / DGD_FILE).read_text()))
    jobs = list(yaml.safe_load_all((folder / BENCH_FILE).read_text()))
    return files, documents, jobs


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("mode", ["agg", "disagg"])
@pytest.mark.parametrize("backend", ["vllm", "sglang", "trtllm"])
def test_every_mode_and_backend_is_deployed_as_replayed(tmp_path, backend, mode, variant):
    config, record = trial_record(mode=mode, backend=backend, **VARIANTS[variant])
    files, documents, jobs = written(tmp_path, record, config)
    assert [problem for d in [*documents, *jobs] for problem in document_problems(d)] == []
    dgd = documents[0]
    assert (dgd["apiVersion"], dgd["kind"]) == ("nvidia.com/v1beta1", "DynamoGraphDeployment")
    assert dgd["metadata"] == {**dgd["metadata"], "name": files.name, "namespace": DEFAULT_NAMESPACE}
    release = installed_release()
    assert release.version == metadata.version("ai-dynamo")
    components = components_by_role(dgd)
    for role, component in components.items():  # every image is the installed release's
        image = main_container(component)["image"]
        expected = release.planner_image if role == "planner" else release.backends[backend].image
        assert image == expected and image.endswith(f":{release.version}")
    played = replayed(record)
    shapes = {"agg": record.spec.parallel_config} if mode == "agg" else {
        "prefill": record.spec.parallel_config.prefill, "decode": record.spec.parallel_config.decode}  # fmt: skip
    for role, replica in shapes.items():  # GPUs, replicas, and each replayed engine setting in the command
        component = components[role]
        assert component["replicas"] == replica.replicas
        assert int(main_container(component)["resources"]["limits"][GPU]) == replica.shape.gpus
        assert main_container(component)["workingDir"] == release.backends[backend].working_dir
        engine, deployed = played.roles[role], deployed_engine(backend, component)
        assert deployed["tp"] == replica.shape.tp == engine.tp
        for setting in ("max_num_seqs", "max_num_batched_tokens", "block_size", "gpu_memory_utilization"):
            assert deployed[setting] == pytest.approx(engine.settings[setting]), setting
        assert deployed["chunked_prefill"] is True  # the mocker's default, replayed
        assert deployed["enable_prefix_caching"] is engine.settings["enable_prefix_caching"]
        assert deployed["nextn"] == engine.settings.get("nextn", 0) == 0  # no MTP drafts: no speculative config
    frontend = frontend_config(main_container(components["frontend"]))  # the 1.5.1 frontend's own parser
    assert frontend.router_mode == {"round_robin": "round-robin", "kv_router": "kv"}[played.router_mode]
    for name, value in played.router.items():
        assert getattr(frontend, name) == pytest.approx(value), name
    if played.planner is None:
        assert "planner" not in components
    else:
        assert planner_config(main_container(components["planner"])) == {  # PlannerConfig accepts it
            **played.planner,
            "environment": "kubernetes",
            "backend": backend,
            "model_name": played.model,
        }
        _planner_finds_its_workers(dgd, played)
    assert files.differences == [] and differences(played, dgd, {r: "h200_sxm" for r in played.roles}) == []
    (job,) = jobs  # the benchmark: pinned client, this deployment's own frontend, the replayed load
    script = job["spec"]["template"]["spec"]["containers"][0]["args"][0]
    assert f"aiperf=={AIPERF}" in script and f"--url {frontend_url(files.name, DEFAULT_NAMESPACE)}" in script
    assert "--request-rate 4" in script and "--request-count 40" in script and "--isl 1024" in script


MTP_LAYOUTS = {
    "agg": ReplicaConfig(shape=ParallelShape(tp=8, moe_ep=8)),
    "disagg": DisaggConfig(prefill=ReplicaConfig(shape=ParallelShape(tp=8, moe_ep=8)),
                           decode=ReplicaConfig(shape=ParallelShape(tp=8, moe_ep=8))),
}  # fmt: skip


@pytest.mark.parametrize("mode", ["agg", "disagg"])
@pytest.mark.parametrize("backend", ["vllm", "sglang", "trtllm"])
def test_mtp_drafts_reach_the_replay_and_every_engine_as_each_engine_spells_them(tmp_path, backend, mode):
    drafting = "agg" if mode == "agg" else "decode"
    config, record = trial_record(mode=mode, backend=backend, layout=MTP_LAYOUTS[mode], knobs={f"{drafting}_nextn": 2},
                                  model_name="deepseek-ai/DeepSeek-V3", gpu_budget=16,
                                  **{f"{drafting}_nextn": [0, 2]})  # fmt: skip
    plan = record.spec.replay.plan
    engine = getattr(plan, f"{drafting}_engine_args")
    assert (engine["aic_nextn"], engine["aic_nextn_accept_rates"]) == (2, "0.85,0.3")  # the mocker's own, stated
    if mode == "disagg":  # a prefill engine emits one token: it drafts nothing in the replay
        assert "aic_nextn" not in plan.prefill_engine_args
    files, documents, _ = written(tmp_path, record, config)
    assert files.differences == []
    for role, component in components_by_role(documents[0]).items():
        if role in ("frontend", "planner"):
            continue
        main = main_container(component)
        assert deployed_engine(backend, component)["nextn"] == 2, role  # every engine, prefill's sized for the drafts
        script = " ".join([*main.get("command", []), *main.get("args", [])])
        if backend == "vllm":
            spec = json.loads(main["args"][main["args"].index("--speculative-config") + 1])
            assert spec == {"method": "mtp", "num_speculative_tokens": 2}
        elif backend == "sglang":
            for flag, value in (("num-steps", 2), ("eagle-topk", 1), ("num-draft-tokens", 3)):
                assert re.search(rf"--speculative-{flag} \W?{value}\b", script), flag
        else:
            engine_yaml = yaml.safe_load(re.search(r"<<'YAML'\n(.*?)\nYAML\n", script, re.DOTALL).group(1))
            assert engine_yaml["speculative_config"] == {"decoding_type": "MTP", "num_nextn_predict_layers": 2}
    if backend == "sglang":  # another speculation than the replay's is named
        decode = main_container(components_by_role(documents[0])[drafting])
        decode["args"] = [decode["args"][0].replace("\nexec ", "\nargs+=(--speculative-eagle-topk 4)\nexec ")]
        found = differences(replayed(record), documents[0], {r: "h200_sxm" for r in replayed(record).roles})
        assert f"{drafting}: nextn 2 replayed, 2 with --speculative-eagle-topk 4 in the sglang command" in found


def _planner_finds_its_workers(dgd, played):
    """ai-dynamo's planner resolves the components it scales, and their GPUs, from this very document."""
    from dynamo.planner.config.defaults import SubComponentType
    from dynamo.planner.monitoring.dgd_services import get_component_from_type_or_name

    roles = {"decode": SubComponentType.DECODE, "prefill": SubComponentType.PREFILL}
    if played.mode == "agg":
        roles = {"agg": SubComponentType.DECODE}
    for role, kind in roles.items():
        service = get_component_from_type_or_name(dgd, kind)
        assert (
            service.get_gpu_count() == played.roles[role].gpus
            and service.number_replicas() == played.roles[role].workers
        )
        assert service.service["scalingAdapter"] == {"enabled": True}


@pytest.mark.parametrize("backend", ["vllm", "sglang", "trtllm"])
@pytest.mark.parametrize(
    "shape",
    [ParallelShape(tp=4, moe_ep=4), ParallelShape(tp=1, attention_dp=4, moe_ep=4), ParallelShape(tp=2, moe_tp=2)],
    ids=["tep", "dep", "moe_tp"],
)
def test_moe_layouts_keep_their_gpus_and_parallelism(tmp_path, backend, shape):
    config, record = trial_record(backend=backend, layout=ReplicaConfig(shape=shape), model_name="Qwen/Qwen3-30B-A3B")
    files, documents, _ = written(tmp_path, record, config)
    assert files.differences == [] and [d["kind"] for d in documents] == ["DynamoGraphDeployment"]
    worker = components_by_role(documents[0])["agg"]
    assert int(main_container(worker)["resources"]["limits"][GPU]) == shape.gpus and "multinode" not in worker
    deployed = deployed_engine(backend, worker)
    assert (deployed["tp"], deployed["attention_dp"] or 1, deployed["moe_ep"]) == (shape.tp, shape.attention_dp,
                                                                                   shape.moe_ep)  # fmt: skip


def test_a_setting_changed_in_the_files_is_named_and_one_dynamo_cannot_set_says_why(tmp_path):
    config, record = trial_record(mode="disagg", backend="sglang", startup_time=30)
    files, documents, _ = written(tmp_path, record, config)
    assert files.differences == [
        "planner: a worker start-up of 30 s was simulated; a deployment cannot set it (a real worker takes as "
        "long as its image, weights and engine take to load)"
    ]
    dgd, played = documents[0], replayed(record)
    decode = main_container(components_by_role(dgd)["decode"])
    decode["args"] = [decode["args"][0].replace('--max-running-requests "256"', '--max-running-requests "64"')]
    main_container(components_by_role(dgd)["frontend"])["args"] += ["--router-mode", "kv"]
    found = differences(played, dgd, {"prefill": "h200_sxm", "decode": "h200_sxm"})
    assert "decode: max_num_seqs 256 replayed, 64.0 in the sglang command" in found
    assert "router: round_robin replayed, the frontend routes kv" in found


def test_names_are_per_run_and_rank_and_within_the_operator_s_limits(tmp_path):
    config, record = trial_record()
    names = set()
    for run in ("c0ffee123456", "C0FFEE123456", "my_sweep.v2", "x" * 64):
        for rank in (1, 2, 3):
            name = deployment_name(run, rank, "team-a")
            assert name_problems(name, "team-a", ["frontend", "worker", "prefill", "decode", "planner"]) == []
            names.add(name)
    assert len(names) == 12  # runs differing only in case, or cut short, still differ
    assert deployment_name("c0ffee123456", 2, DEFAULT_NAMESPACE) == "spica-c0ffee123456-2"
    for bad in ("Team_A", "-a", "a" * 64, "n" * 50):
        with pytest.raises(ValueError, match="namespace"):
            check_namespace(bad)
    files, documents, jobs = written(tmp_path, record, config, rank=2, namespace="team-a")
    assert documents[0]["metadata"]["namespace"] == jobs[0]["metadata"]["namespace"] == "team-a"
    assert jobs[0]["metadata"]["name"] == f"{files.name}-bench" and files.name.endswith("-2")


def test_the_structural_check_refuses_what_a_cluster_would_and_passes_dynamo_s_own_blueprints():
    from importlib.resources import files

    blueprints = files("dynamo.profiler").joinpath("templates", "dgd")
    for backend in ("vllm", "sglang", "trtllm"):
        for mode in ("agg", "disagg"):
            dgd = yaml.safe_load(blueprints.joinpath(backend, f"{mode}.yaml").read_text())
            dgd["metadata"]["namespace"] = "default"
            assert document_problems(dgd) == [], (backend, mode)
    good = yaml.safe_load(blueprints.joinpath("vllm", "agg.yaml").read_text())
    good["metadata"]["namespace"] = "default"

    def broken(change):
        dgd = yaml.safe_load(yaml.safe_dump(good))
        change(dgd)
        return document_problems(dgd)

    container = lambda d: d["spec"]["components"][1]["podTemplate"]["spec"]["containers"][0]  # noqa: E731
    assert any("unknown field of V1Container" in p for p in broken(lambda d: container(d).update(gpus=1)))
    assert any("is not an integer" in p for p in broken(lambda d: d["spec"]["components"][0].update(replicas="2")))
    assert any("required" in p for p in broken(lambda d: container(d).pop("name")))
    assert any("unknown field" in p for p in broken(lambda d: d["spec"]["components"][0].update(envFromSecret="x")))
    assert any(".type" in p for p in broken(lambda d: d["spec"]["components"][0].update(type="router")))
    assert any("not unique" in p for p in broken(lambda d: d["spec"]["components"][1].update(name="frontend")))
    assert any("Grove" in p for p in broken(lambda d: d["metadata"].update(name="d" * 40)))
    assert any("nvidia.com/gpu" in p for p in broken(lambda d: container(d).pop("resources")))
    alpha = {**good, "apiVersion": "nvidia.com/v1alpha1"}
    assert document_problems(alpha) and document_problems({**good, "metadata": {"name": "x"}})


def test_a_deployment_file_summary_is_a_schema_checked_artifact(tmp_path):
    config, record = trial_record(mode="disagg", backend="trtllm", router="kv_router")
    files, _, _ = written(tmp_path, record, config)
    stored = DeploymentFiles.model_validate_json((tmp_path / "1" / "deploy.json").read_text())
    assert stored == files and stored.engine.startswith("TensorRT-LLM ") and stored.dynamo_version == "1.5.1"
    assert set(stored.files) == {"README.md", "deploy.json", "k8s_bench.yaml", "k8s_deploy.yaml", "replayed.json",
                                 "trial.json", "slurm"}  # fmt: skip
    assert stored.slurm == ["deploy.sbatch", "README.md"] and stored.slurm_error is None
    readme = (tmp_path / "1" / "README.md").read_text()
    assert f"kubectl apply -f {DGD_FILE}" in readme and "TensorRT-LLM 1.3.0rc25" in readme and "1.2.0rc6" in readme
