"""A benchmark Job per replayed workload: the same traffic, sent to this deployment's own frontend.

The Job (`batch/v1`, built as data) runs AIPerf, the client aiconfigurator's generator writes jobs
for, pinned to one release (`AIPERF`, on PyPI; its flags below are that release's), in the
generator's client image. It targets `http://<dgd>-frontend.<namespace>.svc.cluster.local:8000`:
the operator names a component's Service `<dgd>-<component>` (deploy/k8s_names.py) and the frontend
listens on 8000 (`--http-port 8000`). Each workload the trial was replayed on is sent as replayed:

- synthetic open loop: `--request-rate` with Poisson arrivals, the replayed request count;
- a closed loop (`concurrency`, or the candidate's own cap for a `kv_load_ratio` workload): `--concurrency`;
- fixed ISL/OSL (`--isl`, `--osl`, no spread), a shared prefix (`--num-prefix-prompts`,
  `--prefix-prompt-length`, the rest of the ISL fresh), sessions of several turns
  (`--conversation-num`, `--conversation-turn-mean`, `--conversation-turn-delay-mean`);
- a Mooncake trace: `--input-file` with `--custom-dataset-type mooncake_trace`, on its recorded
  timestamps (`--fixed-schedule`, `--replay-speedup` when the replay sped it up) or at the replayed
  concurrency; the trace file comes from a ConfigMap the README says how to create (a trace is
  larger than a document should hold).
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

from spica_lib.replay.request import ReplayRequest

AIPERF = "0.13.0"  # the newest AIPerf release on PyPI when this was written (checked with `pip index versions`)
CLIENT_IMAGE = "python:3.12-slim"  # aiconfigurator's generator's benchmark image (BenchConfig.image)
FRONTEND_PORT = 8000
TRACE_MOUNT = "/trace"
HF_SECRET = "hf-token-secret"  # the secret the generator's components read their Hugging Face token from


def frontend_url(dgd: str, namespace: str) -> str:
    return f"http://{dgd}-frontend.{namespace}.svc.cluster.local:{FRONTEND_PORT}"


def job_name(dgd: str, workload: int | None) -> str:
    """`<dgd>-bench`, or `<dgd>-bench-<n>` for the n-th of several workloads (names may not fit a label)."""
    return f"{dgd}-bench" + (f"-{workload}" if workload else "")


def trace_configmap(dgd: str, workload: int | None) -> str:
    return f"{dgd}-trace" + (f"-{workload}" if workload else "")


def benchmark_job(
    *, dgd: str, namespace: str, model: str, request: ReplayRequest, workload: int | None = None
) -> dict[str, Any]:
    """The Job that sends one replayed workload to the deployment `dgd` in `namespace`."""
    name = job_name(dgd, workload)
    argv = [*aiperf_argv(request, model, frontend_url(dgd, namespace)), "--artifact-dir", "/tmp/aiperf"]
    script = f"pip install --no-cache-dir aiperf=={AIPERF} && {shlex.join(argv)}"
    container: dict[str, Any] = {
        "name": "aiperf",
        "image": CLIENT_IMAGE,
        "command": ["/bin/sh", "-c"],
        "args": [script],
        "envFrom": [{"secretRef": {"name": HF_SECRET, "optional": True}}],  # a gated model's tokenizer
    }
    pod: dict[str, Any] = {"restartPolicy": "Never", "containers": [container]}
    trace = request.workload.trace_path
    if trace is not None:
        volume = "trace"
        container["volumeMounts"] = [{"name": volume, "mountPath": TRACE_MOUNT, "readOnly": True}]
        pod["volumes"] = [{"name": volume, "configMap": {"name": trace_configmap(dgd, workload)}}]
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace, "labels": {"app.kubernetes.io/part-of": dgd}},
        "spec": {"backoffLimit": 0, "template": {"metadata": {"labels": {"app.kubernetes.io/part-of": dgd}},
                                                 "spec": pod}},
    }  # fmt: skip


def aiperf_argv(request: ReplayRequest, model: str, url: str, trace_dir: str = TRACE_MOUNT) -> list[str]:
    """`aiperf profile ...` for the replayed traffic of one workload (a trace read from `trace_dir`)."""
    w = request.workload
    # ignore_eos (both ways, as the generator's jobs ask): every output runs its full OSL, as replayed
    argv = ["aiperf", "profile", "--model", model, "--tokenizer", model, "--url", url, "--endpoint-type", "chat",
            "--streaming", "--extra-inputs", "ignore_eos:true", "--extra-inputs", '{"nvext":{"ignore_eos":true}}',
            "--ui", "simple"]  # fmt: skip
    cap = w.effective_in_flight_cap(request.concurrency)
    if w.is_trace_based:
        argv += ["--input-file", f"{trace_dir}/{Path(w.trace_path).name}", "--custom-dataset-type", "mooncake_trace"]
        if cap is not None:
            return [*argv, "--concurrency", str(cap)]
        argv.append("--fixed-schedule")
        return argv + (["--replay-speedup", f"{w.arrival_speedup_ratio:g}"] if w.arrival_speedup_ratio != 1 else [])
    prefix = round(w.shared_prefix_ratio * w.isl) if w.num_prefix_groups else 0
    argv += ["--isl", str(w.isl - prefix), "--isl-stddev", "0", "--osl", str(w.osl), "--osl-stddev", "0"]
    if prefix:
        argv += ["--num-prefix-prompts", str(w.num_prefix_groups), "--prefix-prompt-length", str(prefix)]
    requests = w.resolved_request_count(request.concurrency)
    if w.turns_per_session > 1:
        argv += ["--conversation-num", str(max(1, requests // w.turns_per_session)),
                 "--conversation-turn-mean", str(w.turns_per_session), "--conversation-turn-stddev", "0",
                 "--conversation-turn-delay-mean", f"{w.inter_turn_delay_ms:g}"]  # fmt: skip
    else:
        argv += ["--request-count", str(requests)]
    if cap is not None:
        return [*argv, "--concurrency", str(cap)]
    argv += ["--request-rate", f"{w.request_rate:g}", "--arrival-pattern", "poisson"]
    return argv + (["--random-seed", str(w.arrival_seed)] if w.arrival_seed is not None else [])
