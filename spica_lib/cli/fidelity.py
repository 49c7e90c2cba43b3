"""`spica fidelity`: replay measured silicon rows and print the error table (one line per group)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from spica_lib.base.artifacts import atomic_write_text, write_model
from spica_lib.base.versions import package_versions
from spica_lib.facts.calibration import CalibrationFile
from spica_lib.fidelity.check import RowCheck, check_row, group_errors, held_out_table, markdown_table, select_rows
from spica_lib.fidelity.fit import SPLIT, fit_scales, fits
from spica_lib.fidelity.ranking import ranking_groups, ranking_table
from spica_lib.fidelity.silicon import aggregated_rows, silicon_source


def fidelity_command(
    systems: str,
    backends: str,
    models: str | None,
    limit: int | None,
    json_path: str | None,
    fit_path: str | None = None,
    ranking: bool = False,
    from_json: str | None = None,
) -> int:
    rows = list(select_rows(aggregated_rows(), systems.split(","), backends.split(","), _split(models)))
    if limit is not None:
        rows = _first_per_group(rows, limit)
    if not rows:
        print(f"no aggregated silicon row for systems {systems}, backends {backends}", file=sys.stderr)
        return 2
    checks = _read_checks(from_json, rows) if from_json else _replay_rows(rows)
    print(markdown_table(group_errors(checks)))
    if ranking:
        print("\nRanking, per group of rows measured alike (tokens/s/GPU; then goodput under TTFT <= 2000 ms, "
              "TPOT <= 50 ms):\n")  # fmt: skip
        print(ranking_table(ranking_groups(checks)))
    skipped: dict[str, int] = {}
    for check in checks:
        if check.skipped:
            skipped[check.skipped] = skipped.get(check.skipped, 0) + 1
    for reason, count in sorted(skipped.items(), key=lambda item: -item[1]):
        print(f"skipped {count}: {reason}")
    if json_path:
        atomic_write_text(json_path, json.dumps([c.model_dump(mode="json") for c in checks], indent=1))
    if fit_path:
        return _fit(checks, fit_path)
    return 0


def _replay_rows(rows: list) -> list[RowCheck]:
    checks = []
    for number, row in enumerate(rows, start=1):
        check = check_row(row)
        checks.append(check)
        state = f"skipped: {check.skipped}" if check.skipped else "replayed"
        print(f"[{number}/{len(rows)}] {row.id}: {state}", file=sys.stderr, flush=True)
    return checks


def _read_checks(path: str, rows: list) -> list[RowCheck]:
    """The checks of an earlier `--json` run, for the selected rows (a row it did not check is an error)."""
    kept = {check.row.id: check for check in (RowCheck.model_validate(c) for c in json.loads(Path(path).read_text()))}
    missing = [row.id for row in rows if row.id not in kept]
    if missing:
        raise SystemExit(f"{path} has no check of {len(missing)} selected row(s), e.g. {missing[0]}")
    return [kept[row.id] for row in rows]


def _fit(checks: list[RowCheck], path: str) -> int:
    """Fit the scales, write them, and replay the held-out rows with them: their errors without and with them."""
    scales = fit_scales(checks)
    if not scales:
        print("no replayed row in the fitting half: nothing to fit", file=sys.stderr)
        return 1
    calibration = CalibrationFile(source=silicon_source(), split=SPLIT, scales=scales, versions=package_versions())
    write_model(path, calibration)
    print(f"\nscales written to {path} ({SPLIT}):")
    for s in scales:
        print(f"- {s.system} / {s.backend} / {s.model or 'every model'}: prefill x{s.prefill:.3f}, "
              f"decode x{s.decode:.3f} ({s.fit_rows} rows)")  # fmt: skip
    held_out = [c for c in checks if c.replayed is not None and not fits(c.row)]
    rows = []
    for number, check in enumerate(held_out, start=1):
        row = check.row
        system_wide = check_row(row, calibration.scale_for(row.system, row.backend))
        own = check_row(row, calibration.scale_for(row.system, row.backend, row.model))
        if system_wide.replayed is not None and own.replayed is not None:
            rows.append((check, system_wide, own))
        print(f"[{number}/{len(held_out)}] {row.id}: calibrated", file=sys.stderr, flush=True)
    print("\nHeld-out rows, replay MAPE (signed bias): uncalibrated -> system-wide scales -> the model's own scales:\n")
    print(held_out_table(*([r[i] for r in rows] for i in range(3))))
    return 0


def _split(text: str | None) -> list[str] | None:
    return text.split(",") if text else None


def _first_per_group(rows: list, limit: int) -> list:
    seen: dict[tuple[str, str, str], int] = {}
    out = []
    for row in rows:
        group = (row.system, row.backend, row.model)
        if seen.get(group, 0) < limit:
            seen[group] = seen.get(group, 0) + 1
            out.append(row)
    return out
