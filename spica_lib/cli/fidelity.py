"""`spica fidelity`: replay measured silicon rows and print the error table (one line per group)."""

from __future__ import annotations

import json
import sys

from spica_lib.base.artifacts import atomic_write_text
from spica_lib.fidelity.check import RowCheck, check_row, group_errors, markdown_table, select_rows
from spica_lib.fidelity.silicon import aggregated_rows


def fidelity_command(systems: str, backends: str, models: str | None, limit: int | None, json_path: str | None) -> int:
    rows = list(select_rows(aggregated_rows(), systems.split(","), backends.split(","), _split(models)))
    if limit is not None:
        rows = _first_per_group(rows, limit)
    if not rows:
        print(f"no aggregated silicon row for systems {systems}, backends {backends}", file=sys.stderr)
        return 2
    checks: list[RowCheck] = []
    for number, row in enumerate(rows, start=1):
        check = check_row(row)
        checks.append(check)
        state = f"skipped: {check.skipped}" if check.skipped else "replayed"
        print(f"[{number}/{len(rows)}] {row.id}: {state}", file=sys.stderr, flush=True)
    print(markdown_table(group_errors(checks)))
    skipped: dict[str, int] = {}
    for check in checks:
        if check.skipped:
            skipped[check.skipped] = skipped.get(check.skipped, 0) + 1
    for reason, count in sorted(skipped.items(), key=lambda item: -item[1]):
        print(f"skipped {count}: {reason}")
    if json_path:
        atomic_write_text(json_path, json.dumps([c.model_dump(mode="json") for c in checks], indent=1))
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
