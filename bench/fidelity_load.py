"""Benchmark: the replay's error by load, where its TTFT goes, and the cross-validated fit against the earlier one.

Results: docs/fidelity/load.md (every table there is printed by one run of this script).

Rows: every aggregated row of aiconfigurator-core's silicon_sample.csv this stack can replay, at most
--per-model per (system, backend, model), picked evenly along the model's (concurrency, ISL, OSL) order, none above
--max-concurrency (fidelity/cap.py). Each is replayed uncalibrated by every protocol `spica fidelity --fit` chooses
among (fidelity/protocol.py FIT_PROTOCOLS), and by the protocol of before issue 71 (BEFORE_71) for the earlier fit.
Replays are kept in the fidelity cache (`$SPICA_FIDELITY_CACHE`, default ~/.cache/spica/fidelity) by trial and
versions, so a second run replays only what changed (fidelity/replay_cache.py).

Printed:
1. the uncalibrated error (the default protocol) per concurrency band and per ISL band, every row;
2. where the time goes: per group, the replay's queue share of TTFT and the regression of measured TTFT on the
   replay's two parts (fidelity/attribution.py), with a count of which part carries the error;
3. the fit `spica fidelity --fit` makes (fidelity/calibrate.py): its choices, and on the held-out half per group, per
   concurrency band and per ISL band, uncalibrated -> with the kept correction;
4. the earlier kept fit on the same held-out rows (fidelity/earlier_fit.py), per group beside the new one: held-out
   TTFT MAPE, and TPOT and tokens/s/GPU against the uncalibrated replay; the medians over groups, and a bootstrap
   interval over groups of the median difference.

Run: .venv/bin/python bench/fidelity_load.py [--per-model 16] [--max-concurrency 256] [--jobs 2] [--json FILE]
     [--fit FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("DYN_LOG", "error")
REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402

from spica_lib.base.versions import package_versions  # noqa: E402
from spica_lib.cli.fidelity_fit import choice_table, held_out_errors, print_test, replay_checks  # noqa: E402
from spica_lib.facts.calibration import write_calibration  # noqa: E402
from spica_lib.fidelity.attribution import regression_table, ttft_regression  # noqa: E402
from spica_lib.fidelity.bands import band_overview  # noqa: E402
from spica_lib.fidelity.calibrate import fit_calibration  # noqa: E402
from spica_lib.fidelity.cap import RowCap, capped  # noqa: E402
from spica_lib.fidelity.check import METRICS, RowCheck, check_rows, unsupported_reason  # noqa: E402
from spica_lib.fidelity.earlier_fit import earlier_kept_fit  # noqa: E402
from spica_lib.fidelity.protocol import BEFORE_71, FIT_PROTOCOLS, MEASURED  # noqa: E402
from spica_lib.fidelity.replay_cache import ReplayCache  # noqa: E402
from spica_lib.fidelity.silicon import aggregated_rows, silicon_source  # noqa: E402
from spica_lib.fidelity.tables import group_errors  # noqa: E402

BOOTSTRAP, SEED = 2000, 71


def selected(per_model: int, max_concurrency: int):
    rows = [r for r in aggregated_rows() if unsupported_reason(r) is None]
    return capped(rows, RowCap(rows_per_group=per_model, max_concurrency=max_concurrency, per="model"))


def replay_all(rows, jobs: int, cache: ReplayCache) -> dict[str, list[RowCheck]]:
    runs = {}
    for protocol in (*FIT_PROTOCOLS, BEFORE_71):
        started, done = time.perf_counter(), 0

        def tell(check: RowCheck) -> None:
            nonlocal done
            done += 1
            if done % 25 == 0:
                print(f"  {protocol.name}: {done}/{len(rows)} ({time.perf_counter() - started:.0f} s)", file=sys.stderr, flush=True)

        runs[protocol.name] = check_rows(rows, protocol, parallel=jobs, on_done=tell, cache=cache)
    return runs


def which_part(checks: list[RowCheck]) -> str:
    """Over the groups' regressions: how many say each part is replayed right (its 90 % interval holds 1), too
    short (above 1) or too long (below 1)."""
    groups: dict[tuple, list] = {}
    for c in checks:
        if c.replayed is not None and c.parts is not None:
            groups.setdefault((c.row.system, c.row.backend, c.row.model), []).append((c.parts, c.measured.ttft_ms))
    fits = [ttft_regression(pairs) for pairs in groups.values() if len(pairs) >= 3]
    lines = ["| part | groups | silicon longer (interval above 1) | as replayed (interval holds 1) | silicon shorter "
             "(interval below 1) | median coefficient |", "|---|---:|---:|---:|---:|---:|"]  # fmt: skip
    for name, value, interval in (("queue wait", "queue", "queue_interval"), ("admit to first token", "admit", "admit_interval")):
        rows = [(getattr(f, value), getattr(f, interval)) for f in fits if not (value == "queue" and f.queue_share == 0)]
        above = sum(1 for _, (low, _) in rows if low > 1)
        below = sum(1 for _, (_, high) in rows if high < 1)
        median = statistics.median(v for v, _ in rows) if rows else float("nan")
        lines.append(f"| {name} | {len(rows)} | {above} | {len(rows) - above - below} | {below} | {median:.2f} |")
    return "\n".join(lines)


def band_metrics(before: list[RowCheck], after: list[RowCheck], kind: str) -> str:
    """Per group and band of `kind`, one line: the held-out rows' TTFT, TPOT and tokens/s/GPU MAPE uncalibrated (the
    default protocol) -> with the kept correction (what a sweep uses), on the same rows (by id)."""
    from spica_lib.fidelity.bands import KINDS, band_label, band_of

    fixed = {c.row.id: c for c in after if c.replayed is not None}
    cells: dict[tuple, list[tuple[RowCheck, RowCheck]]] = {}
    for c in before:
        if c.replayed is not None and c.row.id in fixed:
            value = c.row.concurrency if kind == "concurrency" else c.row.isl
            low, high = band_of(value, KINDS[kind])
            cells.setdefault((c.row.system, c.row.backend, c.row.model, low, high or 10**9), []).append((c, fixed[c.row.id]))
    lines = [f"| system | backend | model | {kind} band | rows | TTFT | TPOT | tok/s/GPU |", "|---|---|---|---|---:|---|---|---|"]
    for (system, backend, model, low, high), pairs in sorted(cells.items()):
        shown = []
        for metric in METRICS:
            a, b = (100 * statistics.fmean(abs(getattr(x.replayed, metric) / getattr(x.measured, metric) - 1) for x in side)
                    for side in zip(*pairs, strict=True))  # fmt: skip
            shown.append(f"{a:.0f} → {b:.0f} %")
        band = band_label(low, None if high == 10**9 else high)
        lines.append(f"| {system} | {backend} | {model} | {band} | {len(pairs)} | " + " | ".join(shown) + " |")
    return "\n".join(lines)


def comparison(plain, earlier, new_before, new_after, report_only) -> str:
    """Per group: held-out TTFT MAPE uncalibrated (before issue 71) -> the earlier kept fit -> the kept correction now
    (-> report-only), and TPOT and tokens/s/GPU uncalibrated (the default protocol now) -> kept now."""
    def by_group(checks):
        return {(g.system, g.backend, g.model): g for g in group_errors(checks)}

    old, kept, base, new, only = by_group(plain), by_group(earlier), by_group(new_before), by_group(new_after), by_group(report_only)
    common = sorted(set(kept) & set(new))
    lines = ["| system | backend | model | held-out rows (earlier / now) | TTFT: uncalibrated before 71 → earlier kept fit "
             "→ kept now (→ report-only) | TPOT: uncalibrated → kept now (earlier: uncalibrated before 71 → earlier kept fit) | "
             "tok/s/GPU: the same |",
             "|---|---|---|---|---|---|---|"]  # fmt: skip
    diffs, worse, with_only = [], [], []
    earlier_worse: set = set()
    for g in common:
        ttft = f"{old[g].replay_mape['ttft_ms']:.0f} → {kept[g].replay_mape['ttft_ms']:.0f} → {new[g].replay_mape['ttft_ms']:.0f} %"
        if g in only:
            ttft += f" (→ {only[g].replay_mape['ttft_ms']:.0f} %)"
        cells = [ttft]
        for metric in ("tpot_ms", "tokens_per_second_per_gpu"):
            a, b = base[g].replay_mape[metric], new[g].replay_mape[metric]
            above = round(b, 1) > round(a, 1)  # above at all, at the tables' one-decimal resolution
            c, d = old[g].replay_mape[metric], kept[g].replay_mape[metric]
            cells.append(f"{a:.1f} → {b:.1f} %" + (" ⚠" if above else "") + f" (earlier: {c:.1f} → {d:.1f} %)")
            if above:
                worse.append(f"{'/'.join(g)} {metric} {a:.1f} → {b:.1f} %")
            if round(d, 1) > round(c, 1):
                earlier_worse.add(g)
        diffs.append((kept[g].replay_mape["ttft_ms"], new[g].replay_mape["ttft_ms"]))
        with_only.append((only.get(g) or new[g]).replay_mape["ttft_ms"])
        lines.append(f"| {' | '.join(g)} | {kept[g].rows} / {new[g].rows} | " + " | ".join(cells) + " |")
    earlier_median = statistics.median(a for a, _ in diffs)
    new_median = statistics.median(b for _, b in diffs)
    rng = np.random.default_rng(SEED)
    boot = []
    for _ in range(BOOTSTRAP):
        pick = [diffs[i] for i in rng.integers(0, len(diffs), len(diffs))]
        boot.append(statistics.median(b for _, b in pick) - statistics.median(a for a, _ in pick))
    low, high = np.percentile(boot, [5, 95])
    lines += ["", f"Median over {len(diffs)} groups of held-out TTFT MAPE: earlier kept fit {earlier_median:.1f} %, kept "
              f"now {new_median:.1f} % (difference {new_median - earlier_median:+.1f} points; 90 % bootstrap interval "
              f"over groups {low:+.1f} to {high:+.1f})."]  # fmt: skip
    lines.append(f"With the report-only correction where one was kept ({len(only)} groups; post hoc, no sweep applies "
                 f"it), else the kept one: median {statistics.median(with_only):.1f} %; uncalibrated before issue 71: "
                 f"median {statistics.median(old[g].replay_mape['ttft_ms'] for g in common):.1f} %.")  # fmt: skip
    lines.append(f"The earlier kept fit's held-out TPOT or tok/s/GPU MAPE above its uncalibrated replay's (before issue "
                 f"71): {len(earlier_worse)} of {len(common)} groups.")  # fmt: skip
    lines.append("Groups where held-out TPOT or tok/s/GPU MAPE is above the uncalibrated replay's: "
                 + ("; ".join(worse) if worse else "none") + ".")  # fmt: skip
    return "\n".join(lines)


def hindsight(outcome, runs: dict[str, list[RowCheck]], earlier: list[RowCheck]) -> str:
    """How low any correction of the family could go on these held-out rows: per group, every protocol and
    correction fitted on the held-out rows themselves (in sample: a bound no fit made elsewhere can beat), judged per
    concurrency band beside the earlier kept fit and the kept correction. Where even this bound stays above the earlier
    kept fit less 10 points, the rows cannot support that gain."""
    from spica_lib.fidelity.bands import LOAD_BANDS, band_bounds, band_label, band_of
    from spica_lib.fidelity.choice import CORRECTIONS, fit_correction, mape, usable

    held = {c.row.id for c in outcome.uncalibrated}
    kept = {c.row.id: c for c in outcome.calibrated}
    old = {c.row.id: c for c in earlier}
    groups = sorted({(c.row.system, c.row.backend, c.row.model) for c in outcome.uncalibrated})
    best: dict[str, RowCheck] = {}
    for group in groups:
        options = []
        for name, run in runs.items():
            rows = [c for c in run if c.row.id in held and c.replayed is not None and (c.row.system, c.row.backend, c.row.model) == group]
            for kind in CORRECTIONS:
                for decode in (False, True):
                    if rows and usable(kind, rows, decode):
                        predicted = [fit_correction(kind, rows, decode).predict(c) for c in rows]
                        options.append((mape(predicted)["ttft_ms"], predicted))
        if options:
            best.update({c.row.id: c for c in min(options, key=lambda o: o[0])[1]})
    lines = ["| concurrency band | groups | uncalibrated | earlier kept fit | kept now | in hindsight (fitted on these rows) |",
             "|---|---:|---:|---:|---:|---:|"]  # fmt: skip

    def median_by_group(source: dict[str, RowCheck], ids: set[str]) -> float:
        per = {}
        for i in ids & set(source):
            c = source[i]
            per.setdefault((c.row.system, c.row.backend, c.row.model), []).append(abs(c.replayed.ttft_ms / c.measured.ttft_ms - 1))
        return 100 * statistics.median(statistics.fmean(v) for v in per.values()) if per else float("nan")

    plain = {c.row.id: c for c in outcome.uncalibrated}
    for low, high in [*band_bounds(LOAD_BANDS), (1, None)]:
        ids = {i for i, c in plain.items() if (low, high) == (1, None) or band_of(c.row.concurrency, LOAD_BANDS) == (low, high)}
        ids &= set(kept) & set(old) & set(best)
        groups_here = len({(plain[i].row.system, plain[i].row.backend, plain[i].row.model) for i in ids})
        name = "every row" if (low, high) == (1, None) else band_label(low, high)
        lines.append(f"| {name} | {groups_here} | {median_by_group(plain, ids):.0f} % | {median_by_group(old, ids):.0f} % | "
                     f"{median_by_group(kept, ids):.0f} % | {median_by_group(best, ids):.0f} % |")  # fmt: skip
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--per-model", type=int, default=16)
    parser.add_argument("--max-concurrency", type=int, default=256)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--json")
    parser.add_argument("--fit", default=None, help="write the calibration here (default: not kept)")
    args = parser.parse_args()
    started = time.perf_counter()
    cache = ReplayCache()
    rows, left_out = selected(args.per_model, args.max_concurrency)
    runs = replay_all(rows, args.jobs, cache)
    if args.json:
        Path(args.json).write_text(json.dumps([c.model_dump(mode="json") for run in runs.values() for c in run]))
    default = runs[MEASURED.name]
    replayed = [c for c in default if c.replayed is not None]
    print(f"{len(rows)} rows selected ({len(left_out)} left out by the cap: at most {args.per_model} per model, "
          f"concurrency <= {args.max_concurrency}); {len(replayed)} replayed by {MEASURED.name!r} in "
          f"{len({(c.row.system, c.row.backend, c.row.model) for c in replayed})} groups.\n")  # fmt: skip
    print("## 1. Uncalibrated error by load (every replayed row, the default protocol)\n")
    for kind in ("concurrency", "isl"):
        print(band_overview(default, kind) + "\n")
    print("## 2. Where the time goes (a regression over each group's rows: the rows measure TTFT only)\n")
    groups: dict[tuple, list] = {}
    for c in replayed:
        if c.parts is not None:
            groups.setdefault((c.row.system, c.row.backend, c.row.model), []).append((c.parts, c.measured.ttft_ms))
    print(regression_table(groups) + "\n")
    print(which_part(default) + "\n")
    print("## 3. The cross-validated fit (spica fidelity --fit)\n")
    fitting = {name: runs[name] for name in (p.name for p in FIT_PROTOCOLS)}
    rescale = lambda rs, p, scale_for: check_rows(rs, p, scale_for, args.jobs, cache=cache)  # noqa: E731
    outcome = fit_calibration(fitting, MEASURED.name, rescale, f"{silicon_source()} (bench/fidelity_load.py)",
                              package_versions())  # fmt: skip
    assert outcome is not None
    outcome.calibration.held_out = held_out_errors(outcome.uncalibrated, outcome.calibrated)
    if args.fit:
        write_calibration(args.fit, outcome.calibration)
    print(choice_table(outcome.calibration.choices, MEASURED.name))
    print(replay_checks(outcome.calibration.choices, MEASURED.name))
    print_test(outcome, MEASURED.name)
    for kind in ("concurrency", "isl"):
        print(f"\nHeld-out rows per group and {kind} band, MAPE uncalibrated -> with the kept correction:\n")
        print(band_metrics(outcome.uncalibrated, outcome.calibrated, kind))
    print("\n## 4. Against the earlier kept fit (before issue 71), on the held-out half\n")
    earlier_rescale = lambda rs, scale_for: check_rows(rs, BEFORE_71, scale_for, args.jobs, cache=cache)  # noqa: E731
    plain, earlier = earlier_kept_fit(runs[BEFORE_71.name], earlier_rescale)
    print(comparison(plain, earlier, outcome.uncalibrated, outcome.calibrated, outcome.report_only))
    print("\nMedian over groups of held-out TTFT MAPE per concurrency band (the rows every way judged):\n")
    print(hindsight(outcome, fitting, earlier))
    print(f"\n{time.perf_counter() - started:.0f} s on this machine (replays read from the cache where kept)")


if __name__ == "__main__":
    main()
