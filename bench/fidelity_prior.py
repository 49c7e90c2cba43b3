"""Benchmark: the prior correction from aiconfigurator's measured rows, judged by leaving one model out
(docs/fidelity/calibration.md, "A prior, judged on models it was not fitted on"); writes config/calibration/prior.json.

Replays up to --per-model aggregated rows of each (system, backend, model) of aiconfigurator-core's
silicon_sample.csv (spread over the model's rows: every n-th), uncalibrated, by the default replay protocol, then
fits and judges the prior (spica_lib/fidelity/prior.py) and prints, per (system, backend), the cross-validated
MAPE of TTFT, TPOT and tokens/s/GPU against no correction, and whether the prior is kept. `--json FILE` keeps
every row's check; `--from-json FILE` reads them instead of replaying (the checks are keyed by row id and
protocol; a cache of its inputs and the replay's versions, which every check records).

Run: .venv/bin/python bench/fidelity_prior.py [--per-model 8] [--jobs 2] [--json FILE | --from-json FILE]
     [--write config/calibration/prior.json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("DYN_LOG", "error")
REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from spica_lib.base.versions import package_versions  # noqa: E402
from spica_lib.facts.calibration import CalibrationFile, write_calibration  # noqa: E402
from spica_lib.fidelity.check import RowCheck, check_rows, unsupported_reason  # noqa: E402
from spica_lib.fidelity.prior import fit_prior  # noqa: E402
from spica_lib.fidelity.protocol import MEASURED  # noqa: E402
from spica_lib.fidelity.silicon import aggregated_rows, silicon_source  # noqa: E402

SPLIT = "leave one model out: each (system, backend)'s prior is judged on every measured model fitted on the others"


def sampled(per_model: int) -> list:
    groups: dict[tuple[str, str, str], list] = {}
    for row in aggregated_rows():
        if unsupported_reason(row) is None:
            groups.setdefault((row.system, row.backend, row.model), []).append(row)
    out = []
    for rows in groups.values():
        step = max(1, len(rows) // per_model)
        out += rows[::step][:per_model]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--per-model", type=int, default=8)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--json")
    parser.add_argument("--from-json")
    parser.add_argument("--write", default=str(REPO / "config" / "calibration" / "prior.json"))
    args = parser.parse_args()
    started = time.perf_counter()
    rows = sampled(args.per_model)
    if args.from_json:
        checks = [RowCheck.model_validate(c) for c in json.loads(Path(args.from_json).read_text())]
    else:
        checks = check_rows(rows, MEASURED, parallel=args.jobs,
                            on_done=lambda c: print(f"{c.row.id}: {c.skipped or 'replayed'}", file=sys.stderr, flush=True))  # fmt: skip
        if args.json:
            Path(args.json).write_text(json.dumps([c.model_dump(mode="json") for c in checks]))
    scales, verdicts = fit_prior(checks)
    prior = CalibrationFile(source=f"{silicon_source()} (up to {args.per_model} rows per model)", split=SPLIT,
                            protocol=MEASURED.name, scales=scales, cross_validated=verdicts,
                            versions=package_versions())  # fmt: skip
    write_calibration(args.write, prior)
    replayed = sum(c.replayed is not None for c in checks)
    print(f"{replayed} of {len(checks)} sampled rows replayed; prior written to {args.write}\n")
    print("| system | backend | models | rows | TTFT: none → prior | TPOT: none → prior | tok/s/GPU: none → prior | kept |")
    print("|---|---|---:|---:|---|---|---|---|")
    for v in verdicts:
        cells = [f"{v.uncorrected[m]:.0f} % → {v.prior[m]:.0f} %" for m in ("ttft_ms", "tpot_ms", "tokens_per_second_per_gpu")]
        print(f"| {v.system} | {v.backend} | {len(v.models)} | {v.rows} | " + " | ".join(cells) + f" | {'yes' if v.helps else 'no'} |")
    for s in scales:
        print(f"- {s.system} / {s.backend}: prefill x{s.prefill:.3f}, +{s.ttft_overhead_ms:.0f} ms per request, "
              f"decode x{s.decode:.3f} ({s.fit_rows} rows)")
    print(f"({time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()
