"""`spica fidelity --fit`: choose, fit, and judge on the held-out half.

Every row is replayed uncalibrated by each candidate protocol. Per (system, backend, model) and per (system,
backend) over every model, the protocol and the correction are chosen by cross-validation within the fitting half
(fidelity/choice.py) and fitted on the whole fitting half. The held-out half is then the test, and only the test:
- uncalibrated: the default protocol's replay, as `spica fidelity` reports it without a fit;
- calibrated (what a sweep uses): replayed again by the group's chosen protocol with its chosen scales (the
  mocker's speed-up ratios), the affine cost added to TTFT where one was kept (as a sweep adds it, with the
  closed loop's tokens/s/GPU moved by Little's law);
- report-only, where the choice kept one: its post-hoc prediction from the chosen protocol's uncalibrated replay.
Each is judged per group, per concurrency band and per ISL band (fidelity/bands.py). A held-out row of a model
without its own choice (no fitting row) takes its system's.
"""

from __future__ import annotations

from collections.abc import Callable

from pydantic import BaseModel, ConfigDict, Field

from spica_lib.facts.calibration import BandError, CalibrationFile, GroupChoice, StepScale
from spica_lib.fidelity.bands import band_errors
from spica_lib.fidelity.check import Point, RowCheck
from spica_lib.fidelity.choice import Correction, choose
from spica_lib.fidelity.fit import SPLIT, fits
from spica_lib.fidelity.protocol import PROTOCOLS, ReplayProtocol
from spica_lib.fidelity.silicon import SiliconRow

Replay = Callable[[list[SiliconRow], ReplayProtocol, Callable[[SiliconRow], StepScale | None]], list[RowCheck]]
Group = tuple[str, str, str | None]


class FitOutcome(BaseModel):
    """The fit and its test: the calibration file's content, and the held-out rows three ways (the same rows, in one
    order: those replayed uncalibrated by the default protocol and again with the calibration)."""

    model_config = ConfigDict(extra="forbid")

    calibration: CalibrationFile
    uncalibrated: list[RowCheck]
    calibrated: list[RowCheck]
    report_only: list[RowCheck] = Field(default_factory=list)  # the rows whose group kept a report-only correction


def fit_calibration(
    runs: dict[str, list[RowCheck]], default: str, replay: Replay, source: str, versions: dict[str, str]
) -> FitOutcome | None:
    """`runs`: every row replayed uncalibrated by each candidate protocol (protocol name -> checks, one row order);
    `default`: the protocol an uncalibrated check is judged by. `replay(rows, protocol, scale_for)` replays rows
    again with scales. None: no fitting row replayed."""
    choices: dict[Group, tuple[GroupChoice, dict[str, Correction]]] = {}
    modes: dict[Group, list[str]] = {}
    for group in _groups(runs[default]):
        fitting = {p: [c for c in run if fits(c.row) and _in(c.row, group)] for p, run in runs.items()}
        modes[group] = sorted({c.row.mode for c in fitting[default]})
        if modes[group] == ["disagg"]:  # a disagg row has one protocol of its own: nothing to choose among
            fitting = {default: fitting[default]}
        found = choose(group, fitting, default, _verify(replay, group, modes[group]))
        if found is not None:
            choices[group] = found
    if not choices:
        return None
    scales = [_step_scale(choice, fitted["applied"], modes[group]) for group, (choice, fitted) in choices.items()]
    protocols = sorted({choice.protocol for choice, _ in choices.values()})
    calibration = CalibrationFile(source=source, split=SPLIT, scales=scales, versions=versions,
                                  protocol=protocols[0] if len(protocols) == 1 else "per group: see choices",
                                  choices=[choice for choice, _ in choices.values()])  # fmt: skip
    held = [c for c in runs[default] if c.replayed is not None and not fits(c.row)]
    chosen = {c.row.id: _choice_for(choices, c.row) for c in held}
    calibrated = _calibrated(held, chosen, calibration, replay, runs)
    by_id = {c.row.id: c for c in calibrated}
    before = [c for c in held if c.row.id in by_id]
    after = [by_id[c.row.id] for c in before]
    report_only = _report_only(before, chosen, runs)
    calibration.bands = band_errors(before, after, "concurrency") + band_errors(before, after, "isl")
    return FitOutcome(calibration=calibration, uncalibrated=before, calibrated=after, report_only=report_only)


def _verify(replay: Replay, group: Group, modes: list[str]):
    """The group's fitting rows replayed by a protocol with a correction's scales, its per-request cost added, as a
    sweep applies it (fidelity/choice.py checks a candidate with scales on them before keeping it)."""

    def replayed(protocol: str, correction: Correction, checks: list[RowCheck]) -> list[RowCheck]:
        system, backend, model = group
        scale = StepScale(system=system, backend=backend, model=model, prefill=correction.prefill,
                          decode=correction.decode, fit_rows=len(checks), modes=modes, fit=_fit_name(correction),
                          ttft_overhead_ms=correction.cost_ms)  # fmt: skip
        rows = [c.row for c in checks]
        return [_with_cost(c, correction.cost_ms) if c.replayed is not None else c
                for c in replay(rows, PROTOCOLS[protocol], lambda _: scale)]  # fmt: skip

    return replayed


def _groups(checks: list[RowCheck]) -> list[Group]:
    systems = sorted({(c.row.system, c.row.backend) for c in checks})
    models = sorted({(c.row.system, c.row.backend, c.row.model) for c in checks})
    return [(s, b, None) for s, b in systems] + list(models)


def _in(row: SiliconRow, group: Group) -> bool:
    system, backend, model = group
    return (row.system, row.backend) == (system, backend) and model in (None, row.model)


def _choice_for(choices: dict[Group, tuple[GroupChoice, dict[str, Correction]]], row: SiliconRow):
    """The model's own choice where it has one, else its system's (as a sweep looks scales up)."""
    return choices.get((row.system, row.backend, row.model)) or choices.get((row.system, row.backend, None))


def _step_scale(choice: GroupChoice, correction: Correction, modes: list[str]) -> StepScale:
    fit = _fit_name(correction)
    return StepScale(system=choice.system, backend=choice.backend, model=choice.model, prefill=correction.prefill,
                     decode=correction.decode, fit_rows=choice.fitting_rows, modes=modes, fit=fit,
                     ttft_overhead_ms=correction.cost_ms)  # fmt: skip


def _calibrated(
    held: list[RowCheck], chosen: dict, calibration: CalibrationFile, replay: Replay, runs: dict[str, list[RowCheck]]
) -> list[RowCheck]:
    """The held-out rows replayed by their group's protocol with its scales (a `none` correction needs no second
    replay: the chosen protocol's uncalibrated one stands), the affine cost added; the rows replayed, in order."""
    plain = {name: {c.row.id: c for c in run} for name, run in runs.items()}
    found: dict[str, RowCheck] = {}
    by_protocol: dict[str, list[SiliconRow]] = {}
    for check in held:
        choice, _ = chosen[check.row.id]
        if _scaled(calibration.scale_for(check.row.system, check.row.backend, check.row.model)) is None:
            found[check.row.id] = plain[choice.protocol][check.row.id]
        else:
            by_protocol.setdefault(choice.protocol, []).append(check.row)
    for name, rows in by_protocol.items():
        scale_for = lambda r: _scaled(calibration.scale_for(r.system, r.backend, r.model))  # noqa: E731
        found.update({c.row.id: c for c in replay(rows, PROTOCOLS[name], scale_for)})
    out = []
    for check in (found[c.row.id] for c in held if c.row.id in found):
        if check.replayed is not None:
            scale = calibration.scale_for(check.row.system, check.row.backend, check.row.model)
            out.append(_with_cost(check, scale.ttft_overhead_ms if scale is not None else 0.0))
    return out


def _fit_name(correction: Correction) -> str:
    """The StepScale's `fit`: "none" only where both scales are 1 (a replay as it is); `none + decode` scales decode
    steps alone, so it is a "scale" fit of prefill x1 (a "none" fit is never applied: _scaled)."""
    if correction.kind == "none":
        return "scale" if correction.decode_scaled else "none"
    return correction.kind


def _scaled(scale: StepScale | None) -> StepScale | None:
    """The scale the replay applies: none for a `none` fit (both 1: the replay as it is)."""
    return None if scale is None or scale.fit == "none" else scale


def _with_cost(check: RowCheck, cost_ms: float) -> RowCheck:
    """The affine fit's per-request cost added to the replayed TTFT, the closed loop's tokens/s/GPU moved by the
    longer life of each request (Little's law), as a sweep's replay adjusts them (replay/sla_adjust.py)."""
    if not cost_ms:
        return check
    r, osl = check.replayed, check.row.osl
    life = r.ttft_ms + (osl - 1) * r.tpot_ms
    point = Point(ttft_ms=r.ttft_ms + cost_ms, tpot_ms=r.tpot_ms,
                  tokens_per_second_per_gpu=r.tokens_per_second_per_gpu * life / (life + cost_ms))  # fmt: skip
    return check.model_copy(update={"replayed": point})


def _report_only(before: list[RowCheck], chosen: dict, runs: dict[str, list[RowCheck]]) -> list[RowCheck]:
    """The held-out rows whose group kept a report-only correction, as it predicts them (post hoc)."""
    by_protocol = {name: {c.row.id: c for c in run} for name, run in runs.items()}
    out = []
    for check in before:
        choice, fitted = chosen[check.row.id]
        correction = fitted.get("report_only")
        if correction is None:
            continue
        plain = by_protocol[choice.report_only_protocol].get(check.row.id)
        if plain is not None and plain.replayed is not None and (correction.kind != "parts" or plain.parts is not None):
            out.append(correction.predict(plain))
    return out


def band_errors_of(outcome: FitOutcome, kind: str) -> list[BandError]:
    return [b for b in outcome.calibration.bands if b.kind == kind]
