"""`spica status | show | report RUN`: thin readers over a run folder's files."""

from __future__ import annotations

import sys
from pathlib import Path

from spica_lib.cli.reports import trial_report
from spica_lib.run.status import run_status, status_text
from spica_lib.report.view import RunView
from spica_lib.run.layout import RESULTS_ROOT, RunFiles
from spica_lib.trial.describe import describe

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def run_command(command: str, run: str, which: str | None) -> int:
    folder = locate_run(run)
    if folder is None:
        print(f"no run at {run!r} (nor {RESULTS_ROOT}/{run}): give a run folder holding config.json", file=sys.stderr)
        return EXIT_USAGE
    if command == "status":
        print(status_text(folder, run_status(folder)))
        return EXIT_OK
    if command == "report":
        from spica_lib.report.build import write_report

        for path in write_report(RunView(folder), RunFiles(dir=str(folder)).report_dir):
            print(path)
        return EXIT_OK
    return _show(RunView(folder), which or "1")


def locate_run(run: str) -> Path | None:
    for candidate in (Path(run), Path(RESULTS_ROOT) / run):
        if (candidate / "config.json").is_file():
            return candidate
    return None


def _show(view: RunView, which: str) -> int:
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
    print(f"{describe(record.spec)}\n  trial      {key}")
    print(trial_report(record.spec, record.result))
    return EXIT_OK if record.result.status == "feasible" else EXIT_FAILED
