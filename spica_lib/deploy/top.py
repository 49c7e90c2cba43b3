"""Deployment files for the top candidates: the replayed deployment, as files a cluster applies as they are.

For each of the top `sweep.top_k` deployments, `deploy/<rank>/` holds

- `k8s_deploy.yaml`: the DynamoGraphDeployment, `nvidia.com/v1beta1` (deploy/dgd.py says why), made
  from aiconfigurator's generator with every replayed setting as its input (deploy/generator.py), at
  the installed Dynamo release's images and paths (deploy/release.py), named `spica-<run>-<rank>` (a
  DGDR's: `<metadata.name>-<rank>`) in the namespace the files are written for (deploy/k8s_names.py:
  `spica report --namespace`), a DGDR's labels on it;
- `k8s_bench.yaml`: a benchmark Job per replayed workload, sending that traffic to this deployment's
  own frontend with a pinned AIPerf (deploy/bench_job.py);
- `slurm/deploy.sbatch` and its README: the same deployment as `srun` steps on a SLURM cluster, with the
  same traffic sent by AIPerf (deploy/slurm_files.py);
- `trial.json` (the exact trial behind the score) and `replayed.json` (the plan the replay ran);
- `deploy.json` (`DeploymentFiles`) and `README.md`: the names, images and engines, how to apply the
  files, and every replayed setting the files change or cannot express, read back from the YAML as
  written (deploy/settings.py), never assumed.

Every document is checked as a cluster would check it before anything is written (deploy/k8s_check.py);
a document it would refuse is not written, and `error` says why.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict

from spica_lib.base.artifacts import atomic_write_text, write_model
from spica_lib.config import SmartSearchConfig
from spica_lib.deploy import settings
from spica_lib.deploy.bench_job import AIPERF, benchmark_job, frontend_url, job_name, trace_configmap
from spica_lib.deploy.dgd import v1beta1_documents
from spica_lib.deploy.dgdr_status import as_requested, write_dgdr_status
from spica_lib.deploy.generator import generated_documents
from spica_lib.deploy.k8s_check import document_problems
from spica_lib.deploy.k8s_names import DEFAULT_NAMESPACE, deployment_name
from spica_lib.deploy.release import ENGINE_NAME, installed_release
from spica_lib.deploy.replayed import Replayed, replayed
from spica_lib.deploy.slurm_files import write_slurm_files
from spica_lib.deploy.slurm_script import SlurmOptions
from spica_lib.replay.plan import role_sku
from spica_lib.run.view import RunView
from spica_lib.run.layout import deployment_folder
from spica_lib.trial.describe import describe
from spica_lib.trial.spec import TrialRecord

SCHEMA_VERSION = 3  # 3: the SLURM script; 2: v1beta1, named per run and rank, written for a namespace, benchmark Jobs
DGD_FILE = "k8s_deploy.yaml"
BENCH_FILE = "k8s_bench.yaml"
CONFIGMAP_BYTES = 1024 * 1024  # what the API server stores in one ConfigMap


class DeploymentFiles(BaseModel):
    """Artifact `deploy/<rank>/deploy.json`: what was written for one ranked deployment, and how it differs."""

    model_config = ConfigDict(extra="forbid")

    schema_version: int = SCHEMA_VERSION
    rank: int
    key: str
    deployment: str
    name: str  # the DynamoGraphDeployment's name (its components', Services' and Jobs' start with it)
    namespace: str
    dynamo_version: str  # the installed ai-dynamo release every image is of
    images: list[str]
    engine: str | None = None  # the engine and version the images carry
    perf_db: dict[str, str]  # role -> the perf-DB version (and GPU type) the replay timed it with
    files: list[str]
    differences: list[str]  # the files change or cannot express these replayed settings
    error: str | None = None  # no Kubernetes files: the generator failed, or a cluster would refuse one
    slurm: list[str] = []  # the files of slurm/ (empty: none, see slurm_error)
    slurm_error: str | None = None  # why there is no SLURM script
    # The GPUs per node the files were written for (search_space.gpus_per_node, else the system's): the node the
    # Kubernetes files place workers on and the SLURM script asks for, which a rehearsal asks for too.
    gpus_per_node: int | None = None


def write_top_deployments(
    view: RunView, deploy_dir: str | Path, namespace: str = DEFAULT_NAMESPACE, slurm: SlurmOptions | None = None
) -> list[DeploymentFiles]:
    """deploy/<rank>/ for each of the top `sweep.top_k` ranked deployments (the Pareto front's first, for a front)."""
    Path(deploy_dir).mkdir(parents=True, exist_ok=True)
    top = view.ranked[: view.config.sweep.top_k]
    written = [
        write_deployment(deployment_folder(deploy_dir, rank), rank, view.records[row.key], view.config,
                         run=view.validated.run, namespace=namespace, slurm=slurm)
        for rank, row in enumerate(top, start=1)
    ]  # fmt: skip
    selected = Path(deployment_folder(deploy_dir, 1)) / DGD_FILE  # a DGDR's answer: its status names the recommendation's DGD
    ready = bool(written) and written[0].error is None and selected.is_file()
    write_dgdr_status(view.config, deploy_dir, next(yaml.safe_load_all(selected.read_text())) if ready else None)
    return written


def write_deployment(
    folder: str | Path, rank: int, record: TrialRecord, config: SmartSearchConfig, *, run: str,
    namespace: str = DEFAULT_NAMESPACE, slurm: SlurmOptions | None = None,
) -> DeploymentFiles:  # fmt: skip
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for stale in folder.iterdir():  # files of an earlier report (another namespace, an older layout)
        if stale.is_file() and not stale.name.startswith("rehearsal"):  # a rehearsal's record is not the report's
            stale.unlink()
    shutil.rmtree(folder / "slurm", ignore_errors=True)
    write_model(folder / "trial.json", record)
    write_model(folder / "replayed.json", record.spec.replay.plan)
    played = replayed(record)
    release = installed_release()
    name = deployment_name(run, rank, namespace, request=config.dgdr.name if config.dgdr is not None else None)
    summary = DeploymentFiles(
        rank=rank, key=record.key, deployment=describe(record.spec), name=name, namespace=namespace,
        dynamo_version=release.version, images=[], perf_db={}, files=[], differences=[],
    )  # fmt: skip
    skus = {role: role_sku(record.spec.sample, role) for role in played.roles}
    summary.gpus_per_node = config.search_space.node_gpus(skus.get("decode") or skus.get("agg"))
    backend = release.backends[played.backend]
    if backend.engine_version:
        summary.engine = f"{ENGINE_NAME[played.backend]} {backend.engine_version}"
    summary.perf_db = {
        role: f"{ENGINE_NAME[played.backend]} {engine.perf_db_version} on {engine.system}"
        for role, engine in played.roles.items()
    }
    try:
        documents, jobs = _documents(record, played, name, namespace, skus, rank, run, config)
        atomic_write_text(folder / DGD_FILE, dump_documents(documents))
        atomic_write_text(folder / BENCH_FILE, dump_documents(jobs))
        dgd = next(yaml.safe_load_all((folder / DGD_FILE).read_text(encoding="utf-8")))  # read back as written
        summary.images = sorted({_image(c) for c in dgd["spec"]["components"]})
        summary.differences = settings.differences(played, dgd, skus) + _version_difference(record, release.version)
    except Exception as exc:  # the files stay honest: say what failed rather than emit something else
        summary.error = f"{type(exc).__name__}: {exc}"
    if summary.error is None:
        try:  # from the Kubernetes file as written: the same commands, the same engine flags
            summary.slurm = write_slurm_files(folder / "slurm", record, dgd, name=name, rank=rank, run=run,
                                              dynamo=release.version, options=slurm or SlurmOptions(),
                                              gpus_per_node=summary.gpus_per_node)  # fmt: skip
        except Exception as exc:  # noqa: BLE001 - said in deploy.json, the Kubernetes files stand
            summary.slurm_error = f"{type(exc).__name__}: {exc}"
    summary.files = sorted({p.name for p in folder.iterdir()} | {"README.md", "deploy.json"})
    write_model(folder / "deploy.json", summary)
    atomic_write_text(folder / "README.md", _readme(summary, record, played))
    return summary


def _documents(
    record: TrialRecord, played: Replayed, name: str, namespace: str, skus: dict[str, str], rank: int, run: str,
    config: SmartSearchConfig,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:  # fmt: skip
    workload = record.spec.replay.workload
    node = config.search_space.node_gpus(skus.get("decode") or skus.get("agg"))
    generated = generated_documents(
        played, name=name, namespace=namespace, system=skus.get("decode") or skus["agg"],
        isl=workload.isl, osl=workload.osl, gpus_per_node=node,
    )  # fmt: skip
    annotations = {"spica.dev/run": run, "spica.dev/rank": str(rank), "spica.dev/trial": record.key}
    documents = v1beta1_documents(generated, played, name=name, namespace=namespace, skus=skus, annotations=annotations,
                                  gpus_per_node=node)  # fmt: skip
    documents[0] = as_requested(documents[0], config)  # a DGDR's labels and overrides.dgd
    jobs = [
        benchmark_job(dgd=name, namespace=namespace, model=played.model, request=request, workload=index)
        for index, request in _workloads(record)
    ]
    rejected = [problem for document in [*documents, *jobs] for problem in document_problems(document)]
    if rejected:
        raise ValueError("a cluster would refuse the generated files: " + "; ".join(rejected))
    return documents, jobs


def _workloads(record: TrialRecord) -> list[tuple[int | None, Any]]:
    """Each replayed workload's request, numbered when there are several."""
    spec = record.spec
    if not spec.workloads:
        return [(None, spec.replay)]
    return [(index, w.replay) for index, w in enumerate(spec.workloads, start=1)]


def dump_documents(documents: list[dict[str, Any]]) -> str:
    """YAML of the documents, multi-line strings (scripts) as literal blocks."""
    return yaml.dump_all(documents, Dumper=_Dumper, sort_keys=False, width=120)


class _Dumper(yaml.SafeDumper):
    pass


def _text(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|" if "\n" in value else None)


_Dumper.add_representer(str, _text)


def _image(component: dict[str, Any]) -> str:
    containers = component["podTemplate"]["spec"]["containers"]
    return next(c["image"] for c in containers if c["name"] == "main")


def _version_difference(record: TrialRecord, installed: str) -> list[str]:
    replayed_with = record.result.versions.get("ai-dynamo")
    if replayed_with and replayed_with != installed:
        return [f"dynamo: the trial was replayed with ai-dynamo {replayed_with}; the images are {installed}'s"]
    return []


def _readme(summary: DeploymentFiles, record: TrialRecord, played: Replayed) -> str:
    ns, name = summary.namespace, summary.name
    lines = [f"# Rank {summary.rank}: {summary.deployment}", "",
             f"Trial `{summary.key}`; files written for namespace `{ns}` (`spica report <run> --namespace NS` "
             "writes them for another).", ""]  # fmt: skip
    if summary.error:
        return "\n".join([*lines, f"**No Kubernetes files**: {summary.error}", ""])
    lines += [
        "## Apply", "",
        "```bash",
        f"kubectl create secret generic hf-token-secret -n {ns} --from-literal=HF_TOKEN=<your token>  # once",
        f"kubectl apply -f {DGD_FILE}",
        f"kubectl wait -n {ns} --for=condition=Ready dynamographdeployment/{name} --timeout=60m",
    ]  # fmt: skip
    for index, request in _workloads(record):
        trace = request.workload.trace_path
        if trace:
            lines.append(f"kubectl create configmap -n {ns} {trace_configmap(name, index)} --from-file={trace}")
            if Path(trace).is_file() and Path(trace).stat().st_size > CONFIGMAP_BYTES:
                lines.append("# the trace is over a ConfigMap's 1 MiB: mount it at /trace from a volume instead")
    lines.append(f"kubectl apply -f {BENCH_FILE}")
    lines += [f"kubectl logs -n {ns} -f job/{job_name(name, index)}" for index, _ in _workloads(record)]
    lines += [
        "```", "",
        f"The DynamoGraphDeployment `{name}` (`nvidia.com/v1beta1`) serves at `{frontend_url(name, ns)}`; "
        f"each benchmark Job runs AIPerf {AIPERF} against it with the traffic the trial was replayed on. Every "
        f"name starts with `{name}`, which ends with the rank, so the top deployments of a run apply side by side.",
        "",
        "## What runs", "",
        f"- Images of ai-dynamo {summary.dynamo_version}, the release the sweep replayed: "
        + ", ".join(f"`{image}`" for image in summary.images) + ".",
    ]  # fmt: skip
    if summary.engine:
        timed = "; ".join(f"{role}: {db}" for role, db in summary.perf_db.items())
        lines.append(
            f"- Engine: the image carries {summary.engine} (the version ai-dynamo {summary.dynamo_version}'s "
            f"`[{played.backend}]` extra pins); the replay timed each step from aiconfigurator's perf DB for "
            f"{timed}. The scores are for the perf DB's engine: measure the image's before trusting their level."
        )
    lines += ["", "## Differences from the replayed deployment", ""]
    if summary.differences:
        lines += ["Fix these before comparing measurements with the replay:", ""]
        lines += [f"- {d}" for d in summary.differences]
    else:
        lines.append(
            "None: every replayed engine, router and planner setting is in the components' commands, read back "
            f"from `{DGD_FILE}` as written (deploy.json lists the files)."
        )
    return "\n".join(lines) + "\n"
