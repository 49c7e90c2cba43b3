"""Benchmark: four corrections of the replay side by side on held-out measured rows.

Results: docs/fidelity/calibration.md, "Four ways".

For a set of replayed rows (a `--json` file of `spica fidelity` or bench/fidelity_prior.py: each row's measured and
uncalibrated replayed TTFT, TPOT and tokens/s/GPU), the held-out half of the fixed split (fidelity/fit.py) is
predicted four ways:
  - uncalibrated: the replay as it is;
  - the prior: the affine fit of the prior's rows (--prior-json) of the same system and backend, every model but
    the row's own (the prior as a sweep without rows of its model meets it);
  - scale-only: the row's model's scales fitted on the fitting half (geometric means);
  - affine: the row's model's prefill scale and per-request cost, and decode scale, on the fitting half.
A closed loop's TTFT follows the prefill step time and TPOT the decode step time, so each prediction scales the
uncalibrated replay (and adds the cost); tokens/s/GPU follows from the two. Printed per (system, backend, model):
held-out rows and each way's MAPE of TTFT, TPOT and tokens/s/GPU, then per group of rows measured alike Kendall's tau
and top-1 regret of the goodput order (fidelity/ranking.py) each way.

Run: .venv/bin/python bench/fidelity_fourway.py ROWS.json [--prior-json PRIOR_ROWS.json] [--label NAME]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from spica_lib.facts.calibration import CalibrationFile  # noqa: E402
from spica_lib.fidelity.check import Point, RowCheck  # noqa: E402
from spica_lib.fidelity.fit import fit_scales, fits  # noqa: E402
from spica_lib.fidelity.prior import affine_line, mape  # noqa: E402
from spica_lib.fidelity.ranking import MIN_ROWS, ranking_groups  # noqa: E402
from spica_lib.fidelity.silicon import tokens_per_second_per_gpu  # noqa: E402

WAYS = ("uncalibrated", "prior", "scale-only", "affine")


def predicted(check: RowCheck, prefill: float, cost: float, decode: float) -> RowCheck:
    row, r = check.row, check.replayed
    ttft, tpot = prefill * r.ttft_ms + cost, decode * r.tpot_ms
    point = Point(ttft_ms=ttft, tpot_ms=tpot, tokens_per_second_per_gpu=tokens_per_second_per_gpu(
        row.concurrency, row.osl, ttft, tpot, row.gpus))  # fmt: skip
    return check.model_copy(update={"replayed": point})


def load(path: str) -> list[RowCheck]:
    return [c for c in (RowCheck.model_validate(d) for d in json.loads(Path(path).read_text())) if c.replayed is not None]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("rows")
    parser.add_argument("--prior-json")
    parser.add_argument("--label", default="")
    args = parser.parse_args()
    checks = load(args.rows)
    prior_rows = load(args.prior_json) if args.prior_json else []
    held = [c for c in checks if not fits(c.row)]
    fitting = [c for c in checks if fits(c.row)]
    scaled = CalibrationFile(source="", split="", scales=fit_scales(fitting))
    affine = CalibrationFile(source="", split="", scales=fit_scales(fitting, affine=True))
    ways: dict[str, list[RowCheck]] = {way: [] for way in WAYS}
    for check in held:
        row = check.row
        s, a = scaled.scale_for(row.system, row.backend, row.model), affine.scale_for(row.system, row.backend, row.model)
        others = [p for p in prior_rows if (p.row.system, p.row.backend) == (row.system, row.backend) and p.row.model != row.model]
        if s is None or a is None or len({p.row.model for p in others}) < 1:
            continue
        line = affine_line(row.system, row.backend, others)
        ways["uncalibrated"].append(check)
        ways["prior"].append(predicted(check, line.prefill, line.ttft_overhead_ms, line.decode))
        ways["scale-only"].append(predicted(check, s.prefill, 0.0, s.decode))
        ways["affine"].append(predicted(check, a.prefill, a.ttft_overhead_ms, a.decode))
    print(f"{args.label}: {len(ways['uncalibrated'])} held-out rows of {len(checks)} replayed (the prior from "
          f"{len(prior_rows)} rows of other models)\n")  # fmt: skip
    print("| system | backend | model | held-out rows | " + " | ".join(f"TTFT / TPOT / tok/s/GPU: {w}" for w in WAYS) + " |")
    print("|---|---|---|---:|" + "---|" * len(WAYS))
    groups = sorted({(c.row.system, c.row.backend, c.row.model) for c in ways["uncalibrated"]})
    for group in groups:
        cells = []
        for way in WAYS:
            members = [c for c in ways[way] if (c.row.system, c.row.backend, c.row.model) == group]
            e = mape(members)
            cells.append(f"{e['ttft_ms']:.0f} / {e['tpot_ms']:.0f} / {e['tokens_per_second_per_gpu']:.0f} %")
        rows = sum(1 for c in ways["uncalibrated"] if (c.row.system, c.row.backend, c.row.model) == group)
        print(f"| {' | '.join(group)} | {rows} | " + " | ".join(cells) + " |")
    print(f"\nGoodput order per group of at least {MIN_ROWS} held-out rows measured alike (Kendall's tau, top-1 regret):\n")
    print("| way | groups | median tau | groups with regret ≤ 5 % | median regret |")
    print("|---|---:|---:|---:|---:|")
    for way in WAYS:
        found = ranking_groups(ways[way])
        taus = [t for g in found if (t := g.goodput_tau.get("replayed")) is not None]
        regrets = [r for g in found if (r := g.goodput_regret_percent.get("replayed")) is not None]
        good = sum(r <= 5.0 for r in regrets)
        print(f"| {way} | {len(found)} | {statistics.median(taus) if taus else float('nan'):.2f} | {good} / {len(regrets)} | "
              f"{statistics.median(regrets) if regrets else float('nan'):.1f} % |")


if __name__ == "__main__":
    main()
