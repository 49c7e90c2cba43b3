"""`spica status | show | report RUN`: thin readers over a run folder's files."""

from __future__ import annotations

import sys
from pathlib import Path

from spica_lib.cli.reports import trial_report
from spica_lib.deploy.k8s_names import DEFAULT_NAMESPACE
from spica_lib.deploy.slurm_script import SlurmOptions
from spica_lib.run.layout import RESULTS_ROOT, RunFiles
from spica_lib.run.status import run_status, status_text
from spica_lib.run.view import RunView
from spica_lib.trial.describe import describe

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def run_command(
    command: str, run: str, which: str | None, namespace: str = DEFAULT_NAMESPACE, manifests: bool = False,
    slurm: SlurmOptions | None = None,
) -> int:  # fmt: skip
    folder = locate_run(run)
    if folder is None:
        print(f"no run at {run!r} (nor {RESULTS_ROOT}/{run}): give a run folder holding config.json", file=sys.stderr)
        return EXIT_USAGE
    if command == "status":
        print(status_text(folder, run_status(folder)))
        return EXIT_OK
    if command == "report":
        return _report(RunView(folder), namespace, slurm)
    return _show(RunView(folder), which or "1", namespace if manifests else None)


def _report(view: RunView, namespace: str, slurm: SlurmOptions | None = None) -> int:
    """report/ and deploy/<rank>/ again, the deployment files for `namespace` and the SLURM options (the run id
    stays the same)."""
    from spica_lib.deploy.top import write_top_deployments
    from spica_lib.report.build import write_report

    for path in write_report(view, view.files.report_dir):
        print(path)
    failed = 0
    for files in write_top_deployments(view, view.files.deploy_dir, namespace, slurm):
        folder = f"{view.files.deployment(files.rank)}/"
        if files.error:
            failed += 1
            print(f"{folder}: no Kubernetes files: {files.error}", file=sys.stderr)
        else:
            print(f"{folder} {files.name} in namespace {namespace}; {len(files.differences)} difference(s)")
            print(f"{folder}slurm/: " + (files.slurm_error or ", ".join(files.slurm)))
    return EXIT_FAILED if failed else EXIT_OK


def locate_run(run: str) -> Path | None:
    for candidate in (Path(run), Path(RESULTS_ROOT) / run):
        if Path(RunFiles(dir=str(candidate)).config_json).is_file():
            return candidate
    return None


def _show(view: RunView, which: str, namespace: str | None = None) -> int:
    if which.isdigit():
        rank = int(which)
        if not 1 <= rank <= len(view.ranked):
            print(f"rank {rank} is out of range: the run ranks {len(view.ranked)} deployment(s)", file=sys.stderr)
            return EXIT_USAGE
        key = view.ranked[rank - 1].key
    else:
        matches = [key for key in view.records if key.startswith(which)]
        if len(matches) != 1:
            print(f"{which!r} names {len(matches)} trials; give a rank or a longer key prefix", file=sys.stderr)
            return EXIT_USAGE
        key = matches[0]
    record = view.records[key]
    if namespace is not None:
        return _manifests(view, key, namespace)
    print(f"{describe(record.spec)}\n  trial      {key}")
    finished = next((row.finish for row in view.ranked if row.key == key and row.finish is not None), None)
    print(trial_report(record.spec, record.result, fresh=finished, target=view.config.goal.target))
    return EXIT_OK if record.result.status == "feasible" else EXIT_FAILED


def _manifests(view: RunView, key: str, namespace: str) -> int:
    """Print one deployment's Kubernetes files for `namespace` (written to a scratch folder, then removed)."""
    import tempfile

    from spica_lib.deploy.top import BENCH_FILE, DGD_FILE, write_deployment

    ranks = {row.key: rank for rank, row in enumerate(view.ranked, start=1)}
    if key not in ranks:
        print(f"trial {key[:12]} is not ranked (not feasible): it has no deployment files", file=sys.stderr)
        return EXIT_USAGE
    with tempfile.TemporaryDirectory(prefix="spica-manifests-") as scratch:
        files = write_deployment(
            scratch, ranks[key], view.records[key], view.config, run=view.validated.run, namespace=namespace
        )
        if files.error:
            print(f"no Kubernetes files: {files.error}", file=sys.stderr)
            return EXIT_FAILED
        print((Path(scratch) / DGD_FILE).read_text(encoding="utf-8").rstrip())
        print("---")
        print((Path(scratch) / BENCH_FILE).read_text(encoding="utf-8").rstrip())
    for difference in files.differences:
        print(f"# difference: {difference}", file=sys.stderr)
    return EXIT_OK
