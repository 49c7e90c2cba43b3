"""`spica fidelity --fit FILE`: the choice per group, the held-out half as the test, per group and per band."""

from __future__ import annotations

import statistics
import sys

from spica_lib.base.versions import package_versions
from spica_lib.facts.calibration import GroupChoice, HeldOutError, write_calibration
from spica_lib.fidelity.bands import band_errors, band_medians, band_table
from spica_lib.fidelity.calibrate import FitOutcome, Replay, fit_calibration
from spica_lib.fidelity.check import RowCheck
from spica_lib.fidelity.choice import CORRECTIONS, label
from spica_lib.fidelity.fit import SPLIT, under_p90
from spica_lib.fidelity.protocol import ReplayProtocol
from spica_lib.fidelity.ranking import MIN_ROWS, ranking_groups, ranking_table
from spica_lib.fidelity.tables import group_errors, held_out_table


def fit_and_report(runs: dict[str, list[RowCheck]], default: ReplayProtocol, path: str, replay: Replay, source: str) -> int:
    """Choose and fit per group (fidelity/calibrate.py), write FILE, and print the choice and the held-out test."""
    outcome = fit_calibration(runs, default.name, replay, source, package_versions())
    if outcome is None:
        print("no replayed row in the fitting half: nothing to fit", file=sys.stderr)
        return 1
    calibration = outcome.calibration
    calibration.held_out = held_out_errors(outcome.uncalibrated, outcome.calibrated)
    write_calibration(path, calibration)
    print(f"\nFitted on {SPLIT}. Per group, the replay protocol ({', '.join(runs)}) and the correction "
          f"({', '.join(CORRECTIONS)}) of least leave-one-out TTFT error within the fitting half, among those whose "
          f"cross-validated TPOT and tokens/s/GPU errors are not above the uncorrected {default.name!r} protocol's; "
          "`parts` is a post-hoc prediction, report-only (docs/fidelity/load.md):\n")  # fmt: skip
    print(choice_table(calibration.choices, default.name))
    print(replay_checks(calibration.choices, default.name))
    for s in calibration.scales:
        cost = f", +{s.ttft_overhead_ms:.0f} ms per request" if s.ttft_overhead_ms else ""
        print(f"- {s.system} / {s.backend} / {s.model or 'every model'}: {s.fit}: prefill x{s.prefill:.3f}{cost}, "
              f"decode x{s.decode:.3f} ({s.fit_rows} {'+'.join(s.modes)} rows)")  # fmt: skip
    if not outcome.calibrated:
        print("no held-out row replayed: the file has no held-out error", file=sys.stderr)
        return 0
    print_test(outcome, default.name)
    print(f"\nheld-out errors written to {path} (held_out: per system, backend and model; bands: per concurrency and "
          "ISL band; choices: the choice and every candidate's cross-validated error)")  # fmt: skip
    return 0


def print_test(outcome: FitOutcome, default: str) -> None:
    """The held-out half, judged: per group, per concurrency band and per ISL band, and the ranking."""
    before, after = outcome.uncalibrated, outcome.calibrated
    print(f"\nHeld-out rows (the test), replay MAPE (signed bias): uncalibrated ({default!r}) -> the kept protocol and "
          "correction, replayed with its scales (what a sweep uses):\n")  # fmt: skip
    print(held_out_table(before, after))
    print(summary_line(before, after, "the kept correction"))
    if outcome.report_only:
        ids = {c.row.id for c in outcome.report_only}
        plain = [c for c in before if c.row.id in ids]
        kept = [c for c in after if c.row.id in ids]
        print("\nWhere a report-only correction beat the applied one within the fitting half: uncalibrated -> applied "
              "-> report-only (post hoc; no sweep applies it):\n")  # fmt: skip
        print(held_out_table(plain, kept, outcome.report_only))
    for kind in ("concurrency", "isl"):
        errors = [b for b in outcome.calibration.bands if b.kind == kind]
        print(f"\nHeld-out rows per {kind} band, MAPE uncalibrated -> with the kept correction (rows: TTFT, TPOT):\n")
        print(band_table(errors))
        print(f"\nMedians over groups, per {kind} band:\n")
        print(band_medians(errors))
        if outcome.report_only:
            plain = [c for c in before if c.row.id in {r.row.id for r in outcome.report_only}]
            only = band_errors(plain, outcome.report_only, kind)
            print(f"\nThe report-only correction's rows per {kind} band, uncalibrated -> report-only:\n")
            print(band_table(only))
    for label, run in (("uncalibrated", before), ("with the kept correction (what a sweep uses)", after)):
        print(f"\nRanking of the held-out rows, {label} (groups of at least {MIN_ROWS}):\n")
        groups = ranking_groups(run)
        print(ranking_table(groups) if groups else f"(no held-out group of at least {MIN_ROWS} rows measured alike)")


def summary_line(before: list[RowCheck], after: list[RowCheck], label: str) -> str:
    """The median over groups of held-out TTFT MAPE, uncalibrated and with `label`."""
    plain = {(g.system, g.backend, g.model): g.replay_mape["ttft_ms"] for g in group_errors(before)}
    fixed = {(g.system, g.backend, g.model): g.replay_mape["ttft_ms"] for g in group_errors(after)}
    common = sorted(set(plain) & set(fixed))
    if not common:
        return ""
    return (f"\nMedian over {len(common)} groups of the held-out TTFT MAPE: {statistics.median(plain[g] for g in common):.0f} % "
            f"uncalibrated, {statistics.median(fixed[g] for g in common):.0f} % with {label}.")  # fmt: skip


def choice_table(choices: list[GroupChoice], default: str) -> str:
    lines = ["| system | backend | model | fitting rows | protocol | correction (applied) | report-only | "
             "cross-validated TTFT / TPOT / tok/s/GPU MAPE, kept | the same, uncorrected default |",
             "|---|---|---|---:|---|---|---|---|---|"]  # fmt: skip
    for c in choices:
        applied = label(c.applied, c.decode_scaled)
        kept = _candidate(c, c.protocol, applied)
        plain = _candidate(c, default, "none")
        only = (f"{c.report_only} ({c.report_only_protocol}): {_cv(_candidate(c, c.report_only_protocol, c.report_only))}"
                if c.report_only else "—")  # fmt: skip
        lines.append(f"| {c.system} | {c.backend} | {c.model or 'every model'} | {c.fitting_rows} | {c.protocol} | "
                     f"{applied} | {only} | {_cv(kept)} | {_cv(plain)} |")  # fmt: skip
    return "\n".join(lines)


def replay_checks(choices: list[GroupChoice], default: str) -> str:
    """Each candidate with scales the choice replayed on its group's fitting rows before keeping it (in sample): its
    MAPE there beside the uncorrected default protocol's, and whether it was kept or refused for being worse on a
    metric."""
    lines = []
    for choice in choices:
        plain = _candidate(choice, default, "none")
        for c in choice.candidates:
            if c.replay_admissible is None:
                continue
            verdict = "kept" if c.replay_admissible else "refused"
            lines.append(f"- {choice.system} / {choice.backend} / {choice.model or 'every model'}: {c.protocol}, "
                         f"{label(c.correction, c.decode_scaled)}: {_cv_of(c.fitting_replay)} "
                         f"(uncorrected {_cv_of(plain.cv if plain else {})}): {verdict}")  # fmt: skip
    if not lines:
        return ""
    return ("\nCandidates with scales, replayed on the fitting rows before being kept (a prefill scale also slows the "
            "decode steps beside prefill chunks, which the cross-validation cannot see): TTFT / TPOT / tok/s/GPU MAPE "
            "there:\n\n" + "\n".join(lines))  # fmt: skip


def _cv_of(errors: dict[str, float]) -> str:
    if not errors:
        return "no row replayed"
    return f"{errors['ttft_ms']:.0f} / {errors['tpot_ms']:.0f} / {errors['tokens_per_second_per_gpu']:.0f} %"


def _candidate(choice: GroupChoice, protocol: str | None, correction: str | None):
    """The candidate of `protocol` and `correction` (its label: "affine + decode")."""
    found = (c for c in choice.candidates if (c.protocol, label(c.correction, c.decode_scaled)) == (protocol, correction))
    return next(found, None)


def _cv(candidate) -> str:
    if candidate is None:
        return "—"
    cv = candidate.cv
    return f"{cv['ttft_ms']:.0f} / {cv['tpot_ms']:.0f} / {cv['tokens_per_second_per_gpu']:.0f} %"


def held_out_errors(before: list[RowCheck], after: list[RowCheck]) -> list[HeldOutError]:
    """Per (system, backend, model): the held-out rows' MAPE uncalibrated and calibrated, and the 90th percentile of
    how much slower silicon was than the calibrated prediction."""
    calibrated = {(g.system, g.backend, g.model): g for g in group_errors(after)}
    out = []
    for g in group_errors(before):
        group = (g.system, g.backend, g.model)
        if group not in calibrated:
            continue
        mine = [c for c in after if (c.row.system, c.row.backend, c.row.model) == group]
        out.append(HeldOutError(system=g.system, backend=g.backend, model=g.model, rows=g.rows,
                                uncalibrated=g.replay_mape, calibrated=calibrated[group].replay_mape,
                                under_p90=under_p90(mine)))  # fmt: skip
    return out
