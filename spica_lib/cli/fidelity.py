"""`spica fidelity`: replay measured silicon rows and print the error table (one line per group)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from spica_lib.base.artifacts import atomic_write_text
from spica_lib.base.versions import package_versions
from spica_lib.facts.calibration import CalibrationFile, HeldOutError, StepScale, write_calibration
from spica_lib.fidelity.cap import DISAGG_CAP, RowCap, capped
from spica_lib.fidelity.check import (
    RowCheck,
    check_rows,
    group_errors,
    held_out_table,
    markdown_table,
    percentile_table,
    protocol_name,
    unsupported_reason,
)
from spica_lib.fidelity.fit import SPLIT, affine_checks, fit_scales, fits, under_p90
from spica_lib.fidelity.protocol import (
    DISAGG_DESCRIPTION,
    DISAGG_PROTOCOL,
    MEASURED,
    PROTOCOLS,
    SEARCH_DEFAULT,
    ReplayProtocol,
)
from spica_lib.fidelity.protocol_study import protocol_choice_table, protocol_table
from spica_lib.fidelity.ranking import MIN_ROWS, ranking_groups, ranking_table
from spica_lib.fidelity.silicon import SiliconRow, UnreadRow, aggregated_rows, disaggregated_rows, silicon_source

DEFAULT_SYSTEMS = {"agg": "h100_sxm,h200_sxm", "disagg": None}  # None: every system
DEFAULT_BACKENDS = {"agg": "vllm", "disagg": "sglang,vllm,trtllm"}


def fidelity_command(
    systems: str | None,
    backends: str | None,
    models: str | None,
    limit: int | None,
    json_path: str | None,
    fit_path: str | None = None,
    ranking: bool = False,
    from_json: str | None = None,
    protocol: str = MEASURED.name,
    compare_protocols: bool = False,
    jobs: int = 1,
    mode: str = "agg",
    cap: RowCap | None = None,
) -> int:
    """The shipped rows of one mode (silicon_sample.csv), selected, capped, replayed and reported."""
    systems = systems if systems is not None else DEFAULT_SYSTEMS[mode]
    backends = backends if backends is not None else DEFAULT_BACKENDS[mode]
    if mode == "disagg":
        read = list(disaggregated_rows())
        cap = DISAGG_CAP if cap is None else cap
    else:
        read = list(aggregated_rows())
    wanted = _split(systems), backends.split(","), _split(models)
    unread = [r for r in read if isinstance(r, UnreadRow) and _wanted(r, *wanted)]
    rows = [r for r in read if isinstance(r, SiliconRow) and _wanted(r, *wanted)]
    return fidelity_report(rows, unread, json_path, fit_path, ranking, from_json, protocol, compare_protocols, jobs,
                           limit=limit, cap=cap, source=silicon_source(), what=f"{mode} silicon row for systems "
                           f"{systems or 'all'}, backends {backends}")  # fmt: skip


def user_rows_command(
    path: str,
    deployment: str | None,
    limit: int | None,
    json_path: str | None,
    fit_path: str | None,
    ranking: bool,
    from_json: str | None,
    protocol: str,
    compare_protocols: bool,
    jobs: int,
) -> int:
    """`spica fidelity --rows FILE`: your own measured rows, replayed and reported as the shipped ones are."""
    from spica_lib.fidelity.user_rows import RowsError, read_rows

    try:
        rows, unread = read_rows(path, deployment)
    except RowsError as bad:
        print(f"error: {bad}", file=sys.stderr)
        return 2
    for row in rows:
        reason = unsupported_reason(row)
        if reason is not None:  # a row of yours that cannot be replayed is an error, not a count
            print(f"error: {path}: row {row.id}: {_field_of(reason)}: {reason}", file=sys.stderr)
            return 2
    return fidelity_report(rows, unread, json_path, fit_path, ranking, from_json, protocol, compare_protocols, jobs,
                           limit=limit, source=f"your rows: {path}" + (f" with {deployment}" if deployment else ""),
                           what=f"row in {path}")  # fmt: skip


def _field_of(reason: str) -> str:
    """The field of a user's row a refusal is about."""
    if reason.startswith("measured in"):
        return "precision"
    if reason.startswith("model "):
        return "model"
    if reason.startswith("no perf database"):
        return "system/backend"
    if reason.startswith("attention DP in the "):
        return f"{reason.split()[4]}_attention_dp"
    if reason.startswith("TRT-LLM"):
        return "backend"
    return "row"


def fidelity_report(
    rows: list[SiliconRow],
    unread: list[UnreadRow],
    json_path: str | None,
    fit_path: str | None,
    ranking: bool,
    from_json: str | None,
    protocol: str,
    compare_protocols: bool,
    jobs: int,
    *,
    limit: int | None = None,
    cap: RowCap | None = None,
    source: str,
    what: str = "row",
) -> int:
    """Replay (or read back) the rows and print the tables; `unread` are counted with the refusals."""
    left_out: dict[str, str] = {}
    if limit is not None:
        rows = _first_per_group(rows, limit)
    if cap is not None:  # over the replayable rows only: a refused row is counted by its own reason
        replayable = {r.id for r in rows if unsupported_reason(r) is None}
        kept, left_out = capped([r for r in rows if r.id in replayable], cap)
        rows = [r for r in rows if r.id not in left_out]
    if not rows:
        print(f"no {what} to replay", file=sys.stderr)
        return 2
    modes = {r.mode for r in rows}
    if compare_protocols and "disagg" in modes:
        raise SystemExit("--compare-protocols compares the agg replay protocols; disagg rows have one "
                         f"({DISAGG_PROTOCOL}): leave it out for them")  # fmt: skip
    chosen = PROTOCOLS[protocol]
    checks = _read_checks(from_json, rows, chosen) if from_json else _replay_rows(rows, chosen, jobs)
    if "agg" in modes:
        print(f"Agg rows replayed by the {chosen.name!r} protocol: {chosen.describe()}.")
    if "disagg" in modes:
        print(f"Disagg rows replayed by the {DISAGG_PROTOCOL!r} protocol: {DISAGG_DESCRIPTION}.")
    if cap is not None:
        print(f"Rows replayed: {cap.describe()} ({len(left_out)} left out).")
    print()
    print(markdown_table(group_errors(checks, by_shape="disagg" in modes)))
    percentiles = percentile_table(checks)
    if percentiles:
        print("\nThe tails, where the rows measured p90s (MAPE, signed bias):\n")
        print(percentiles)
    compared: list[RowCheck] = []
    if compare_protocols:
        others = [p for p in PROTOCOLS.values() if p != chosen]
        runs = [_read_checks(from_json, rows, p) if from_json else _replay_rows(rows, p, jobs) for p in others]
        compared = [check for run in runs for check in run]
        order = " -> ".join(p.name for p in [*others, chosen])
        print(f"\nBy replay protocol: MAPE (signed bias), {order}; the opening-wave column is {chosen.name} "
              "without each loop's first `concurrency` requests (a client that discards its warm-up), and "
              f"aiconfigurator's TTFT is its own agg estimate at {chosen.name}'s budget:\n")  # fmt: skip
        for protocol_name, other in zip([p.name for p in others], others, strict=True):
            print(f"- {protocol_name}: {other.describe()}")
        print(f"- {chosen.name}: {chosen.describe()}\n")
        print(protocol_table([*runs, checks]))
        print("\nThe same, per ISL/OSL:\n")
        print(protocol_table([*runs, checks], by_shape=True))
        print("\nTTFT by the protocol of least error on each group's fitting half, and on its held-out half:\n")
        print(protocol_choice_table({p.name: run for p, run in zip([*others, chosen], [*runs, checks], strict=True)}))
    if ranking:
        print("\nRanking, per group of rows measured alike (tokens/s/GPU; then goodput under TTFT <= 2000 ms, "
              "TPOT <= 50 ms):\n")  # fmt: skip
        groups = ranking_groups(checks)
        print(ranking_table(groups))
        if not groups:
            print(f"(no group of at least {MIN_ROWS} replayed rows measured alike: nothing to rank)")
    skipped: dict[str, int] = {}
    reasons = [c.skipped for c in checks if c.skipped] + [r.reason for r in unread] + list(left_out.values())
    for reason in reasons:
        skipped[reason] = skipped.get(reason, 0) + 1
    for reason, count in sorted(skipped.items(), key=lambda item: -item[1]):
        print(f"skipped {count}: {reason}")
    if json_path:
        kept = [c.model_dump(mode="json") for c in [*checks, *compared]]
        atomic_write_text(json_path, json.dumps(kept, indent=1))
    if fit_path:
        return _fit(checks, fit_path, chosen, jobs, source)
    return 0


def _replay_rows(rows: list, protocol: ReplayProtocol, jobs: int) -> list[RowCheck]:
    ended = 0

    def tell(check: RowCheck) -> None:
        nonlocal ended
        ended += 1
        state = f"skipped: {check.skipped}" if check.skipped else "replayed"
        print(f"[{ended}/{len(rows)}] {check.protocol} {check.row.id}: {state}", file=sys.stderr, flush=True)

    return check_rows(rows, protocol, parallel=jobs, on_done=tell)


def _read_checks(path: str, rows: list, protocol: ReplayProtocol) -> list[RowCheck]:
    """The checks of an earlier `--json` run by `protocol`, for the selected rows (a row it did not check is an
    error). A check written before protocols existed was replayed by the search's default."""
    kept = {}
    for check in (RowCheck.model_validate(c) for c in json.loads(Path(path).read_text())):
        if (check.protocol or SEARCH_DEFAULT.name) == protocol_name(check.row, protocol):
            kept[check.row.id] = check
    missing = [row.id for row in rows if row.id not in kept]
    if missing:
        raise SystemExit(f"{path} has no {protocol.name} check of {len(missing)} selected row(s), e.g. {missing[0]}")
    return [kept[row.id] for row in rows]


def _fit(checks: list[RowCheck], path: str, protocol: ReplayProtocol, jobs: int, source: str) -> int:
    """Fit both ways (scale-only and affine), replay the held-out rows with the scale-only fit, predict them with
    the affine one, and write per group the fit with the smaller held-out TTFT error, its errors and quantiles next
    to it, and the other's errors: the errors and the ranking tables of the held-out half, all side by side."""
    scaled, affine = fit_scales(checks), fit_scales(checks, affine=True)
    if not scaled:
        print("no replayed row in the fitting half: nothing to fit", file=sys.stderr)
        return 1
    calibration = CalibrationFile(source=source, split=SPLIT, protocol=protocol.name, scales=scaled,
                                  versions=package_versions())  # fmt: skip
    write_calibration(path, calibration)  # the scale-only fit stands until the held-out half has judged both
    print(f"\nfitted on {SPLIT}; agg rows replayed by the {protocol.name!r} protocol, disagg rows by "
          f"{DISAGG_PROTOCOL!r}; a disagg row's prefill scale is fitted on TTFT, its decode scale on TPOT:")  # fmt: skip
    held_out = [c for c in checks if c.replayed is not None and not fits(c.row)]
    rows = [c.row for c in held_out]
    system_wide = check_rows(rows, protocol, lambda r: calibration.scale_for(r.system, r.backend), jobs)
    own = check_rows(rows, protocol, lambda r: calibration.scale_for(r.system, r.backend, r.model), jobs)
    kept = [(c, s, o) for c, s, o in zip(held_out, system_wide, own) if s.replayed is not None and o.replayed is not None]
    if not kept:
        print("no held-out row replayed: the file has no held-out error", file=sys.stderr)
        return 0
    before, wide, after = ([k[i] for k in kept] for i in range(3))
    fitted = CalibrationFile(source=source, split=SPLIT, scales=affine)
    affine_own = affine_checks(before, after, lambda r: fitted.scale_for(r.system, r.backend, r.model))
    affine_wide = affine_checks(before, wide, lambda r: fitted.scale_for(r.system, r.backend))
    chosen = choose_fits(scaled, affine, {"own": (after, affine_own), "wide": (wide, affine_wide)})
    calibration.scales = chosen
    best = [a if _fit_of(chosen, c.row) == "affine" else c for c, a in zip(after, affine_own, strict=True)]
    other = [c if _fit_of(chosen, c.row) == "affine" else a for c, a in zip(after, affine_own, strict=True)]
    calibration.held_out = held_out_errors(before, best, other)
    write_calibration(path, calibration)
    for s in chosen:
        cost = f", +{s.ttft_overhead_ms:.0f} ms per request" if s.fit == "affine" else ""
        print(f"- {s.system} / {s.backend} / {s.model or 'every model'}: {s.fit}: prefill x{s.prefill:.3f}{cost}, "
              f"decode x{s.decode:.3f} ({s.fit_rows} {'+'.join(s.modes)} rows)")  # fmt: skip
    print("\nHeld-out rows, replay MAPE (signed bias): uncalibrated -> system-wide scales -> the model's own scales "
          "-> the model's own affine fit (scale and per-request cost):\n")  # fmt: skip
    print(held_out_table(before, wide, after, affine_own))
    for label, run in (("uncalibrated", before), ("with the fit the file keeps for each model (what a sweep uses)", best)):
        print(f"\nRanking of the held-out rows, {label} (groups of at least {MIN_ROWS}):\n")
        groups = ranking_groups(run)
        print(ranking_table(groups) if groups else f"(no held-out group of at least {MIN_ROWS} rows measured alike)")
    print(f"\nheld-out errors written to {path} (held_out: per system, backend and model)")
    return 0


def choose_fits(
    scaled: list[StepScale], affine: list[StepScale], held: dict[str, tuple[list[RowCheck], list[RowCheck]]]
) -> list[StepScale]:
    """Per (system, backend[, model]): the affine fit where its held-out TTFT MAPE is smaller, else the scale-only
    fit (a model's on its own rows, a system-wide one on every row of its system and backend)."""
    chosen = []
    for scale, line in zip(scaled, affine, strict=True):
        scope = "own" if scale.model else "wide"
        kept, predicted = held[scope]
        mine = [i for i, c in enumerate(kept) if (c.row.system, c.row.backend) == (scale.system, scale.backend)
                and (scale.model is None or c.row.model == scale.model)]  # fmt: skip
        if mine and _ttft_mape([predicted[i] for i in mine]) < _ttft_mape([kept[i] for i in mine]):
            chosen.append(line)
        else:
            chosen.append(scale)
    return chosen


def _ttft_mape(checks: list[RowCheck]) -> float:
    return sum(abs(c.replayed.ttft_ms / c.measured.ttft_ms - 1) for c in checks) / len(checks)


def _fit_of(scales: list[StepScale], row: SiliconRow) -> str:
    found = CalibrationFile(source="", split="", scales=scales).scale_for(row.system, row.backend, row.model)
    return found.fit if found is not None else "scale"


def held_out_errors(before: list[RowCheck], after: list[RowCheck], other: list[RowCheck] | None = None) -> list[HeldOutError]:
    """Per (system, backend, model): the held-out rows' MAPE uncalibrated and calibrated (and by the other fit), and
    the 90th percentile of how much slower silicon was than the calibrated prediction."""
    calibrated = {(g.system, g.backend, g.model): g for g in group_errors(after)}
    others = {(g.system, g.backend, g.model): g for g in group_errors(other or [])}
    out = []
    for g in group_errors(before):
        group = (g.system, g.backend, g.model)
        mine = [c for c in after if (c.row.system, c.row.backend, c.row.model) == group]
        out.append(HeldOutError(system=g.system, backend=g.backend, model=g.model, rows=g.rows,
                                uncalibrated=g.replay_mape, calibrated=calibrated[group].replay_mape,
                                other_fit=others[group].replay_mape if group in others else {},
                                under_p90=under_p90(mine)))  # fmt: skip
    return out


def _wanted(row: SiliconRow | UnreadRow, systems: list[str] | None, backends: list[str], models: list[str] | None) -> bool:
    return (not systems or row.system in systems) and row.backend in backends and (not models or row.model in models)


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
