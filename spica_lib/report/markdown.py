"""`report.md`: the goal, how much of the space was replayed, what failed, the top deployments, the winner."""

from __future__ import annotations

import math
from pathlib import Path

from spica_lib.base.artifacts import read_model
from spica_lib.baselines.compare import comparison_cell
from spica_lib.config.calibration import prior_verdicts
from spica_lib.pools.branches import BranchSpec
from spica_lib.pools.knobs import combinations
from spica_lib.report.dgdr_section import dgdr_section
from spica_lib.report.load_band import load_band_lines
from spica_lib.results.merge import CandidateRow, same_result_as
from spica_lib.results.stress import StressedScore
from spica_lib.results.summary import held_out_text, stops_text
from spica_lib.run.view import RunView
from spica_lib.trial.describe import describe
from spica_lib.trial.score import sla_miss
from spica_lib.trial.spec import TrialResult

UNITS = {
    "throughput": "output tokens/s",
    "throughput_per_gpu": "output tokens/s per GPU",
    "throughput_per_user": "output tokens/s per user",
    "e2e_latency": "mean end-to-end latency (ms), lower is better",
    "goodput": "goodput tokens/s",
    "goodput_per_gpu": "goodput tokens/s per GPU",
    "cost_per_million_output_tokens": "US$ per million output tokens, lower is better",
}
TABLE_ROWS = 10


def score_label(view: RunView) -> str:
    goal = view.config.goal
    if goal.is_pareto:
        return f"{goal.resolved_pareto_objectives[0].value} ({UNITS[goal.resolved_pareto_objectives[0].value]})"
    return f"{goal.target.value} ({UNITS[goal.target.value]})"


def shown(view: RunView, score: float) -> str:
    """A score in the target's own quantity: a minimised target's (stored negated, so higher is better) positive."""
    goal = view.config.goal
    return f"{score if goal.is_pareto or goal.target.maximize else -score:.4g}"


def render(view: RunView, plots: list[str]) -> str:
    """The whole report; `plots` are the image file names written next to it."""
    sections = [_head(view), _space(view), _tallies(view), _top(view), _capacity(view), _stress(view), _baselines(view)]
    sections.append(_per_branch_backend(view))
    sections.append(_winner(view))
    sections.append(dgdr_section(view))
    sections.append(_rehearsals(view))
    sections.append("## Plots\n\n" + "\n".join(f"![{Path(p).stem}]({p})" for p in plots))
    return "\n\n".join(s for s in sections if s) + "\n"


def _head(view: RunView) -> str:
    config, goal = view.config, view.config.goal
    sla = goal.sla
    bounds = [f"{metric} ≤ {bound:g} ms" for metric, bound in sla.bounds()] if sla else []
    space = config.search_space
    target = ", ".join(t.value for t in goal.resolved_pareto_objectives) if goal.is_pareto else goal.target.value
    return "\n".join(
        [
            f"# Spica report — run `{view.validated.run}`",
            "",
            f"- **Model / hardware**: {space.model_name} on {space.hardware_text()}",
            f"- **Goal**: {'Pareto front of ' if goal.is_pareto else 'maximise ' if goal.target.maximize else 'minimise '}"
            f"{target}",
            f"- **SLA**: {', '.join(bounds) if bounds else 'none'}"
            + (" (a hard constraint)" if sla is not None and sla.is_constraint else ""),
            f"- **Search**: {config.sweep.algorithm}, seed {config.sweep.seed}, "
            f"{config.sweep.max_rounds} rounds × {config.sweep.per_round} per branch"
            + (f", {config.sweep.rounds_in_flight} rounds in flight" if config.sweep.rounds_in_flight > 1 else ""),
            f"- **Calibration**: {_calibration(config)}",
            f"- **Traffic**: {search_traffic(config)}",
        ]
        + ([f"- **MTP**: {view.summary.mtp_note}"] if view.summary is not None and view.summary.mtp_note else [])
    )


def search_traffic(config) -> str:
    """What traffic each number of the report is on: the search's sample, or the whole trace."""
    workload = config.workload
    if workload.search_requests is None:
        return "every number below is on the configured traffic (the search replayed all of it)"
    total = workload.model_copy(update={"search_requests": None}).expected_requests()
    whole = f" of {total}" if total else ""
    return (f"the search replayed a stratified sample of {workload.search_requests}{whole} requests of the trace "
            "(sweep.search_sample; seed " + str(workload.search_seed) + "): the search scores, the stress test, the "
            "capacity and the baselines are on that sample; the finish replayed the whole trace (resamples of it, "
            "or its held-out part), so the fresh statistic and the recommendation are the whole trace's, and "
            "Kendall's tau compares the sample's order with the whole trace's")  # fmt: skip


def _calibration(config) -> str:
    """The step-time calibration the replays ran with, where it came from and its measured held-out error."""
    calibration = config.calibration
    space = config.search_space
    if calibration is None or calibration.off:
        why = "calibration: none" if calibration is not None else (
            "several GPU types: a correction is for one" if space.has_gpu_inventory else
            "; ".join(prior_verdicts(space.hardware_sku, list(space.backend))) or "no prior")  # fmt: skip
        return f"none (the perf DB's step times as they are; {why})"
    uncorrected = [b for b in space.backend if b not in calibration.scales]
    rest = f"; {', '.join(uncorrected)}: none (the prior was not kept for it)" if uncorrected else ""
    return f"`{Path(calibration.file).name}` ({calibration.source}): {calibration.describe()}{rest}"


def _space(view: RunView) -> str:
    lines = ["## Search space and coverage", "", "| branch | layouts | knob settings | deployments | replayed |",
             "|---|---:|---:|---:|---:|"]  # fmt: skip
    replayed = {h.deployment_mode: len({o.key for o in h.observations if o.key}) for h in view.histories}
    limited: list[str] = []
    for history in view.histories:
        mode = history.deployment_mode
        spec = read_model(view.files.branch_json(mode), BranchSpec)
        knobs = combinations({k: v for k, v in spec.knob_choices.items() if k != "backend"})
        # A layout runs on the backends that support it, so the space is Σ over layouts of its backends × knobs.
        size = spec.pool_size and sum(spec.pool_size_by_backend.values()) * knobs
        continuous = " (× continuous kv_load_ratio)" if spec.float_ranges else ""
        lines.append(f"| {mode} | {spec.pool_size} | {knobs}{continuous} | {size} | {replayed[mode]} |")
        limited += [f"- {entry.line(mode)}." for entry in spec.replay_limited]
    if limited:
        lines += ["", "Layouts the replay cannot run are not in the pools:", "", *limited]
    return "\n".join(lines)


def _tallies(view: RunView) -> str:
    summary = view.summary
    if summary is None:
        return ""
    tallies = ", ".join(f"{name} {count}" for name, count in summary.tallies.items())
    lines = ["## Outcomes", "", f"{summary.unique_trials} unique replays; observations: {tallies}."]
    if summary.early_stops:  # counted apart from the statuses: which rule stopped how many replays
        stops = stops_text(summary)
        lines += ["", f"Stopped before the end of their replay: {stops} (docs/trials.md, \"Early stops\")."]
    if summary.failure_reasons:
        lines += ["", "| failure reason | count |", "|---|---:|"]
        lines += [f"| {reason[:160]} | {count} |" for reason, count in summary.failure_reasons.items()]
    return "\n".join(lines)


def sla_margin(view: RunView, metrics: dict[str, float], miss: float | None = None) -> str:
    """How far inside (+) or outside (−) the SLA the tightest bound is, in percent (`miss`: a mean SLA ratio);
    marked ⚠ when a calibration measured an error larger than the margin (the margin is within it)."""
    goal = view.config.goal
    if goal.sla is None:
        return "—"
    margin = 1.0 - (sla_miss(metrics, goal) if miss is None else miss)
    error = _measured_error(view)
    return f"{margin * 100:+.0f} %" + (" ⚠" if error is not None and 0 <= margin < error else "")


def _measured_error(view: RunView) -> float | None:
    calibration = view.config.calibration
    return calibration.measured_sla_error() if calibration is not None else None


def _top(view: RunView) -> str:
    rows = view.ranked[:TABLE_ROWS]
    if not rows:
        return "## Top deployments\n\nNo feasible deployment was found."
    title = "Pareto front" if view.config.goal.is_pareto else "Top deployments"
    finished = any(row.finish is not None and row.finish.statistic is not None for row in rows)
    statistic = (view.summary.robustness if view.summary is not None else None) or "mean"
    fresh_head = f" fresh {statistic} |" if finished else ""
    lines = [f"## {title}", "", f"Score: {score_label(view)}. A row marked `= #n` replayed to exactly the "
             "metrics of row n: the knobs that differ did not bind at this load."]  # fmt: skip
    if finished:
        lines += ["", "The search score is each row's replay on the search's own traffic sample; the fresh "
                  f"{statistic} is over the finish's fresh samples, for the finished rows only. For those rows the "
                  "SLA columns, TTFT and ITL are fresh means too; the others' are the search sample's."]  # fmt: skip
    lines += ["", f"| # | deployment | search score |{fresh_head} GPUs | within SLA | SLA margin | TTFT ms | ITL ms | "
              "US$/1M tok | selections |",
              "|---:|---|---:|" + ("---:|" if finished else "") + "---:|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
    ties = same_result_as(rows)
    for position, (row, tie) in enumerate(zip(rows, ties, strict=True), start=1):
        record, m = view.records[row.key], dict(row.candidate.metrics)
        name = describe(record.spec) + (f" (= #{tie})" if tie else "")
        if row.binding_workload is not None:
            name += f" · binds: {row.binding_workload}"
        fresh, miss = "", None
        if finished:
            f = row.finish
            fresh = f" {shown(view, f.statistic)} |" if f is not None and f.statistic is not None else " — |"
            if f is not None and f.statistic is not None:
                m.update(f.metrics)  # the fresh means of what the samples reported
                miss = f.sla_miss
        coverage = m.get("sla_coverage")
        lines.append(
            f"| {position} | {name} | {shown(view, row.candidate.score)} |{fresh} {row.candidate.used_gpus} | "
            f"{'—' if coverage is None else f'{100 * coverage:.0f} %'} | {sla_margin(view, m, miss)} | "
            f"{_ms(m.get('mean_ttft_ms'))} | {_ms(m.get('mean_itl_ms'))} | "
            f"{_usd(m.get('cost_per_million_output_tokens'))} | {row.selections} |"
        )
    if view.summary is not None and view.summary.coverage_warning:
        lines += ["", f"**Warning**: {view.summary.coverage_warning}."]
    error = _measured_error(view)
    if error is not None and view.config.goal.sla is not None:
        safety = ("the SLA was judged with its bounds tightened by it (goal.sla_safety: measured)"
                  if view.config.goal.sla_safety else "set goal.sla_safety: measured to judge the SLA with that margin")
        lines += ["", f"SLA margins are simulated. The calibration measured silicon up to {100 * error:.0f} % slower than "
                  f"predicted in 9 held-out rows of 10: a margin marked ⚠ is smaller than that error; {safety}."]  # fmt: skip
    lines += _finish_section(view, rows)
    return "\n".join(lines)


def _capacity(view: RunView) -> str:
    """How much load the top deployments take within the SLA (results/capacity.py)."""
    capacity = view.capacity
    if capacity is None:
        return ""
    if not capacity.deployments:
        return f"## Capacity\n\nNot sized: {capacity.note}" if capacity.note else ""
    rank = {row.key: position for position, row in enumerate(view.ranked, start=1)}
    deployments = {row.key: row for row in view.ranked}
    goal = view.config.goal
    floor = f"{100 * goal.sla_coverage:g} % of requests within every bound" if goal.sla_coverage else ""
    rule = " and ".join(x for x in (floor, f"the {goal.sla.statistic} SLA" if goal.sla.is_constraint else "") if x)
    offered = f"{capacity.offered_rps:.3g} req/s" if capacity.offered_rps else "the workload's own rate"
    lines = ["## Capacity", "",
             f"The highest load each keeps within the SLA ({rule}), by replays with the arrivals sped up from "
             f"the offered {offered} (bisection to 10 %; latency against load in capacity.png). \"Serves up to\" "
             "is the highest load confirmed on every one of its fresh samples; a load the bisection found but a "
             "fresh sample missed is not used.", "",
             "| # | deployment | serves up to | headroom | breaks at | replays | confirmed on fresh samples |",
             "|---:|---|---:|---:|---:|---:|---|"]  # fmt: skip
    for index, d in enumerate(capacity.deployments):
        at_least = "≥ " if d.broke_at_factor is None and d.usable_factor == d.capacity_factor else ""
        serves = f"{at_least}{d.usable_factor * capacity.offered_rps:.3g} req/s" if capacity.offered_rps else "—"
        broke = f"{d.broke_at_factor:.3g}×" if d.broke_at_factor is not None else "—"
        row = deployments.get(d.key)
        shown_as = describe(view.records[d.key].spec) if row is not None else d.key[:12]
        met, replayed = d.confirmation(d.capacity_factor)
        confirmed = f"{d.capacity_factor:.3g}× met {met}/{replayed}" if replayed else "—"
        below = d.step_below()
        if replayed and met < replayed and below is not None and d.confirmation(below)[1]:
            confirmed += f"; {below:.3g}× met {'/'.join(map(str, d.confirmation(below)))}"
        if replayed and d.confirmed_factor is None:
            confirmed += "; none confirmed: the offered load only"
        if d.broke_at_factor is not None and replayed:
            still, above = d.confirmation(d.broke_at_factor)
            confirmed += f"; {d.broke_at_factor:.3g}× missed {above - still}/{above}"
        lines.append(f"| {rank.get(d.key, '?')} | {shown_as} | {serves} | {at_least}{100 * d.headroom:.0f} % | "
                     f"{broke} | {len(d.points) - 1 + len(d.confirmed)} | {confirmed} |")  # fmt: skip
    lines += ["", f"The recommendation {capacity.sentence(0)}."]
    return "\n".join(lines)


def _rehearsals(view: RunView) -> str:
    """Each rehearsed deployment's live run against its replay (`spica rehearse`: deploy/<rank>/rehearsal.md)."""
    found = sorted(Path(view.files.deploy_dir).glob("*/rehearsal.md"), key=lambda p: int(p.parent.name))
    return "\n\n".join(p.read_text(encoding="utf-8").strip() for p in found)


def _stress(view: RunView) -> str:
    """The finished top under perturbed step times (results/stress.py), and whether #1 stays first."""
    stress = view.stress
    if stress is None or stress.sentence is None:
        return ""
    keys = stress.keys
    lines = ["## If the simulator is off", "",
             f"The top {len(keys)} replayed on the search's traffic with one role's step times "
             f"{100 * stress.band:.0f} % slower or faster than simulated (score: {score_label(view)}). "
             f"The band: {view.config.sweep.stress_band_source or 'sweep.stress_band'}.", "",
             "| step times | " + " | ".join(f"#{i + 1}" for i in range(len(keys))) + " | first |",
             "|---|" + "---:|" * len(keys) + "---|"]  # fmt: skip
    unperturbed = [shown(view, stress.unperturbed[k]) if stress.unperturbed.get(k) is not None else "—" for k in keys]
    lines.append("| as simulated | " + " | ".join(unperturbed) + " | — |")
    perturbations = list(dict.fromkeys(score.perturbation for score in stress.scores))
    for p in perturbations:
        under = {score.key: score for score in stress.scores if score.perturbation == p}
        cells = [_stressed_cell(view, under[k]) for k in keys]
        feasible = [k for k in keys if under[k].score is not None]
        first = max(feasible, key=lambda k: (under[k].score, k == keys[0])) if feasible else None
        lines.append(f"| {p.words.split(' are ')[0]} {p.scale:g}× | " + " | ".join(cells)
                     + f" | {'#' + str(keys.index(first) + 1) if first else '—'} |")  # fmt: skip
    lines += ["", stress.sentence]
    return "\n".join(lines)


def _stressed_cell(view: RunView, score: StressedScore) -> str:
    if score.score is not None:
        return shown(view, score.score)
    if score.status in ("skipped", "pruned"):  # bounded below #1 without a replay, or on the way (results/stress.py)
        return f"≤ {shown(view, score.at_most)}" if score.at_most is not None else "infeasible"
    return score.status


def _baselines(view: RunView) -> str:
    """The winner against each baseline, all scored by the same replay, workload and SLA."""
    summary = view.summary
    if summary is None or not summary.baselines:
        return ""
    lines = ["## Baselines", "", f"Score: {score_label(view)}, each replayed on the search's workload and SLA.", "",
             "| baseline | deployment | score | GPUs | goodput tok/s | US$/1M tok | the winner | note |",
             "|---|---|---:|---:|---:|---:|---:|---|"]  # fmt: skip
    for item in summary.baselines:
        score = shown(view, item.score) if item.score is not None else "—"
        ratio = comparison_cell(item, view.config.goal)
        goodput = f"{item.goodput_tok_s:.0f}" if item.goodput_tok_s is not None else "—"
        cost = f"{item.cost_per_million_usd:.3g}" if item.cost_per_million_usd is not None else "—"
        lines.append(
            f"| {item.label} | {item.deployment or '—'} | {score} | {item.gpus if item.gpus is not None else '—'} "
            f"| {goodput} | {cost} | {ratio} | {item.note or ''} |"
        )
    return "\n".join(lines)


def _finish_section(view: RunView, rows: list[CandidateRow]) -> list[str]:
    """The finished top on fresh samples: each one's verdict against the best, with its simultaneous bounds."""
    finished = [row.finish for row in rows if row.finish is not None]
    summary = view.summary
    if not finished or summary is None or not summary.finish_samples:
        return []
    statistic = {"mean": "mean", "p10": "10th percentile", "worst": "worst sample"}[summary.robustness or "mean"]
    kind = {
        "arrival": "fresh traffic samples (new arrival draws)",
        "bootstrap": "resamples of the trace (blocks of its time drawn with replacement)",
        "holdout": "the held-out traffic (never replayed by the search)",
    }.get(summary.finish_kind or "", "repeated replays")
    low, high = summary.finish_samples_min, summary.finish_samples
    count = f"{high}" if low == high else f"{low} to {high}"
    lines = ["", f"### On {kind}", "",
             f"The top {len(finished)} distinct deployments were replayed on {count} samples each, the same samples "
             f"for all (a sequential finish: {summary.finish_stopped or 'one look'}). Deployments are compared only on "
             "the samples they share: a sample only the recommendation was given (for its level's precision) counts "
             "in its own statistic and in no comparison. \"Behind the leader\" is the leader's "
             f"{statistic} minus this one's, in the goal's unit. The bounds are on how far each is behind the best of "
             "the others, simultaneous at 95 % for the whole table (Hsu's multiple comparisons with the best, "
             "Bonferroni over the comparisons and the looks); bounds from exact replays of one trace are facts about "
             "that traffic, marked *on this traffic*. *equivalent*: shown within the margin "
             f"({summary.equivalence_margin}) of the best on enough samples that a failure on "
             f"{summary.rare_event_share or 'a share'} of traffic windows would have shown (goal.rare_event_share; "
             "*too few*: within the margin on fewer); *behind*: shown worse than the best; *undecided*: "
             "neither, which is not a tie. P(best), among those not shown behind, is the share of resamples of their "
             "shared samples in which each leads (values equal up to float noise tie, and a tie is split).", "",
             "| # | verdict | behind the leader | bounds on the gap to the best | P(best) | feasible samples | sd |",
             "|---:|---|---:|---|---:|---:|---:|"]  # fmt: skip
    for position, rank in enumerate(finished, start=1):
        low_text = "−∞" if rank.behind_low is None else f"{rank.behind_low:+.4g}"
        high_text = "+∞" if rank.behind_high is None else f"{rank.behind_high:+.4g}"
        bounds = "—" if rank.verdict in ("missed", "unscored") else f"{low_text} to {high_text}"
        bounds += " (on this traffic)" if rank.on_this_traffic and bounds != "—" else ""
        behind = "leader" if rank.leader else ("—" if rank.behind is None else f"{rank.behind:.4g}")
        sd = "—" if rank.sd is None else f"{rank.sd:.3g}"
        verdict = rank.verdict + (" (too few)" if rank.too_few_for_rare_events else "")
        verdict += " (recommended)" if rank.recommended else ""
        p_best = "—" if rank.p_best is None else f"{rank.p_best:.0%}"
        feasible = f"{rank.scored}/{rank.samples}"
        feasible += f" ({rank.own_samples} its own)" if rank.own_samples else ""
        feasible += f" ({rank.timed_out} hit the time limit: undecided there)" if rank.timed_out else ""
        lines.append(f"| {position} | {verdict} | {behind} | {bounds} | {p_best} | {feasible} | {sd} |")
    lines += ["", summary.finish_note or ""]
    if summary.finish_kind == "holdout":
        lines += ["", "Held-out check: " + held_out_text(summary)]
    elif summary.finish_kendall_tau is not None:
        lines += ["", f"Kendall's tau between the search's order of these and their order here: "
                      f"{summary.finish_kendall_tau:.2f} (1: the same order)."]  # fmt: skip
    return lines


def _per_workload(view: RunView, result: TrialResult) -> list[str]:
    """The winner on each of several workloads (the headline metrics are the binding one's)."""
    if not result.workloads:
        return []
    lines = ["", "On each workload (the score is set by the one that binds):", "",
             "| workload | score | TTFT ms | ITL ms | requests |", "|---|---:|---:|---:|---:|"]  # fmt: skip
    for name, part in result.workloads.items():
        m = part.metrics
        mark = " (binds)" if name == result.binding_workload else ""
        score = "—" if part.score is None else shown(view, part.score)
        lines.append(
            f"| {name}{mark} | {score} | {_ms(m.get('mean_ttft_ms'))} | {_ms(m.get('mean_itl_ms'))} | "
            f"{m.get('completed_requests', 0):.0f} |"
        )
    return lines


def _per_branch_backend(view: RunView) -> str:
    best: dict[tuple[str, str], tuple[float, str]] = {}
    for row in view.rows:
        backend = str(row.candidate.config.get("backend"))
        if (row.branch, backend) not in best or row.candidate.score > best[(row.branch, backend)][0]:
            best[(row.branch, backend)] = (row.candidate.score, describe(view.records[row.key].spec))
    if not best:
        return ""
    lines = ["## Best per branch and backend", "", "| branch | backend | score | deployment |", "|---|---|---:|---|"]
    lines += [f"| {b} | {k} | {shown(view, s)} | {d} |" for (b, k), (s, d) in sorted(best.items())]
    return "\n".join(lines)


def _winner(view: RunView) -> str:
    if not view.ranked:
        return ""
    row = view.ranked[0]
    record = view.records[row.key]
    lines = ["## The winner", "", f"`{describe(record.spec)}` — trial `{row.key[:12]}` (branch {row.branch}, "
             f"round {row.round}).", ""]  # fmt: skip
    lines += [f"- note: {note}" for note in record.spec.notes]
    lines += load_band_lines(view.config, record)
    lines += _per_workload(view, record.result)
    events = record.result.scaling_events
    if events:
        lines += ["", "Planner scaling events during the replay:", "", "| at (s) | component | from | to |",
                  "|---:|---|---:|---:|"]  # fmt: skip
        lines += [f"| {e.at_s:.0f} | {e.component} | {e.from_count} | {e.to_count} |" for e in events]
    elif record.spec.replay.plan.planner_config is not None:
        lines.append("The planner ran and did not scale during the replay.")
    return "\n".join(lines)


def _usd(value: float | None) -> str:
    return "—" if value is None else f"{value:.3g}"


def _ms(value: float | None) -> str:
    return "—" if value is None or not math.isfinite(value) else f"{value:.0f}"
