"""`spica fidelity`: replay measured silicon rows and print the error table (one line per group)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from spica_lib.base.artifacts import atomic_write_text
from spica_lib.fidelity.cap import DISAGG_CAP, RowCap, capped
from spica_lib.fidelity.check import RowCheck, check_rows, protocol_name, unsupported_reason
from spica_lib.fidelity.attribution import attribution_rows, regression_table
from spica_lib.fidelity.bands import band_errors, band_overview, band_table
from spica_lib.fidelity.protocol import (
    DISAGG_DESCRIPTION,
    DISAGG_PROTOCOL,
    FIT_PROTOCOLS,
    MEASURED,
    PROTOCOLS,
    SEARCH_DEFAULT,
    ReplayProtocol,
)
from spica_lib.fidelity.replay_cache import ReplayCache
from spica_lib.fidelity.protocol_study import protocol_choice_table, protocol_table
from spica_lib.fidelity.ranking import MIN_ROWS, ranking_groups, ranking_table
from spica_lib.fidelity.silicon import SiliconRow, UnreadRow, aggregated_rows, disaggregated_rows, silicon_source
from spica_lib.fidelity.tables import group_errors, markdown_table, percentile_table

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
    *,
    cache_dir: str | None = None,
    attribution: bool = False,
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
                           f"{systems or 'all'}, backends {backends}", cache_dir=cache_dir,
                           attribution=attribution)  # fmt: skip


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
    *,
    cache_dir: str | None = None,
    attribution: bool = False,
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
                           what=f"row in {path}", cache_dir=cache_dir, attribution=attribution)  # fmt: skip


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
    cache_dir: str | None = None,
    attribution: bool = False,
) -> int:
    """Replay (or read back) the rows and print the tables; `unread` are counted with the refusals. With `cache_dir`,
    replays are kept and read back there (fidelity/replay_cache.py); with `attribution`, every row's TTFT is printed
    in its two parts beside the measured one."""
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
    cache = ReplayCache(cache_dir) if cache_dir else None
    replay = lambda p: _read_checks(from_json, rows, p) if from_json else _replay_rows(rows, p, jobs, cache)  # noqa: E731
    checks = replay(chosen)
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
    by_name: dict[str, list[RowCheck]] = {chosen.name: checks}
    if compare_protocols:
        others = [p for p in PROTOCOLS.values() if p != chosen]
        runs = [replay(p) for p in others]
        compared = [check for run in runs for check in run]
        by_name.update({p.name: run for p, run in zip(others, runs, strict=True)})
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
    if any(c.replayed is not None for c in checks):
        _by_load(checks)
    _attribution(checks, attribution)
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
    fitting: dict[str, list[RowCheck]] = {chosen.name: checks}
    if fit_path and "agg" in modes:  # every candidate protocol, for the choice by cross-validation
        for candidate in FIT_PROTOCOLS:
            if candidate != chosen:
                fitting[candidate.name] = by_name.get(candidate.name) or replay(candidate)
    if json_path:
        runs_kept = [*checks, *compared, *(c for name, run in fitting.items() if name != chosen.name for c in run)]
        unique = {(c.protocol, c.row.id): c for c in runs_kept}
        atomic_write_text(json_path, json.dumps([c.model_dump(mode="json") for c in unique.values()], indent=1))
    if fit_path:
        from spica_lib.cli.fidelity_fit import fit_and_report

        rescale = lambda rs, p, scale_for: check_rows(rs, p, scale_for, jobs, cache=cache)  # noqa: E731
        return fit_and_report(fitting, chosen, fit_path, rescale, source)
    return 0


def _by_load(checks: list[RowCheck]) -> None:
    """The uncalibrated error per concurrency band and per ISL band: over every row, then per group."""
    for kind in ("concurrency", "isl"):
        print(f"\nThe error by {kind} band, every replayed row (MAPE, signed bias; docs/fidelity/load.md):\n")
        print(band_overview(checks, kind))
        print(f"\nPer group and {kind} band (rows: TTFT, TPOT MAPE):\n")
        print(band_table(band_errors(checks, checks, kind), calibrated=False))


def _attribution(checks: list[RowCheck], per_row: bool) -> None:
    """Where each replayed row's TTFT goes, and the regression of the measured TTFT on those parts per group."""
    split = [(c.row, c.parts, c.measured.ttft_ms) for c in checks if c.replayed is not None and c.parts is not None]
    if not split:
        return
    if per_row:
        print("\nEach replayed row's mean TTFT in two parts, from the replay's per-request records (arrival, first "
              "admit, first token), beside the measured mean TTFT:\n")  # fmt: skip
        print(attribution_rows(split))
    groups: dict[tuple[str, str, str], list] = {}
    for row, parts, measured in split:
        groups.setdefault((row.system, row.backend, row.model), []).append((parts, measured))
    print("\nWhere the TTFT error goes. The rows measure TTFT only, not its parts, so this is a regression over each "
          "group's rows (every row, as replayed uncalibrated): measured TTFT ~ a x queue wait + b x admit-to-first-"
          "token + c, relative least squares, coefficients >= 0, 90 % bootstrap intervals over the rows. a and b near "
          "1: the replay's part is right; b > 1: silicon's prefill (and the steps it shares) slower; a < 1: the "
          "replay queues where silicon did not (docs/fidelity/load.md):\n")  # fmt: skip
    print(regression_table(groups))


def _replay_rows(rows: list, protocol: ReplayProtocol, jobs: int, cache: ReplayCache | None = None) -> list[RowCheck]:
    ended = 0

    def tell(check: RowCheck) -> None:
        nonlocal ended
        ended += 1
        state = f"skipped: {check.skipped}" if check.skipped else "replayed"
        print(f"[{ended}/{len(rows)}] {check.protocol} {check.row.id}: {state}", file=sys.stderr, flush=True)

    return check_rows(rows, protocol, parallel=jobs, on_done=tell, cache=cache)


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
