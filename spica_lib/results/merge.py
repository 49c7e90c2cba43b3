"""Stage `merge`: every branch's trials become one ranked list (or a Pareto front), as tables.

Outputs: `candidates.parquet` (every feasible deployment: branch, round, trial key, score,
objectives, headline metrics and its flat config as replayed, with how many selections mapped to
it, the trial's notes and, for a row whose metrics equal a better-ranked one's, that row's rank),
`ranked.csv` (scalar goals: best first, ties to fewer GPUs) or `pareto.csv` (non-dominated
candidates along the last objective). With a finish (results/finish.py), the finished top comes
first in the order results/confidence.py gives it (the recommendation first). The stage's
`summary.json` is results/summary.py's.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import pandas as pd
from pydantic import BaseModel, ConfigDict

from spica_lib.config import SmartSearchConfig
from spica_lib.results.confidence import FinishedRank, judge
from spica_lib.results.finish import FinishResult
from spica_lib.results.ranking import pareto_front, rank
from spica_lib.search.history import BranchHistory
from spica_lib.trial.outcome import first_same, outcome
from spica_lib.trial.score import Candidate
from spica_lib.trial.spec import TrialRecord

HEADLINE_METRICS = (
    "output_throughput_tok_s",
    "goodput_output_throughput_tok_s",
    "mean_ttft_ms",
    "p99_ttft_ms",
    "mean_itl_ms",
    "mean_e2e_latency_ms",
    "mean_output_token_throughput_per_user",
    "gpu_hours",
    "cost_per_million_output_tokens",  # only when goal.gpu_hour_usd gives a price
    "cost_usd",
    "sla_coverage",  # the share of requests that met every SLA bound, with an SLA
    "duration_ms",
    "completed_requests",
)


class CandidateRow(BaseModel):
    """One feasible candidate, as a row of candidates.parquet / ranked.csv / pareto.csv."""

    model_config = ConfigDict(extra="forbid")

    key: str
    branch: str
    round: int
    candidate: Candidate
    average_gpus: float | None
    selections: int = 1  # the search's selections that mapped to this deployment (cache hits included)
    notes: list[str] = []
    # Several workloads: the one that set the score, and each workload's score.
    binding_workload: str | None = None
    workload_scores: dict[str, float] = {}
    finish: FinishedRank | None = None  # a finished top deployment's fresh-sample standing (results.confidence)


def collect_candidates(histories: list[BranchHistory], records: dict[str, TrialRecord]) -> list[CandidateRow]:
    """One row per feasible deployment (trial key), in the order the branches first replayed them."""
    mapped = Counter(o.key for history in histories for o in history.observations if o.key)
    rows, seen = [], set()
    for history in histories:
        for observation in history.observations:
            key = observation.key
            if key is None or key in seen or key not in records:
                continue
            record = records[key]
            if record.result.status != "feasible":
                continue
            seen.add(key)
            result = record.result
            candidate = Candidate(
                config=record.spec.sample,
                used_gpus=result.used_gpus,
                score=result.score,
                metrics=result.metrics,
                objectives=result.objectives,
            )
            rows.append(
                CandidateRow(
                    key=key,
                    branch=history.deployment_mode,
                    round=observation.round,
                    candidate=candidate,
                    average_gpus=result.average_gpus,
                    selections=mapped[key],
                    notes=record.spec.notes,
                    binding_workload=result.binding_workload,
                    workload_scores={
                        name: part.score for name, part in (result.workloads or {}).items() if part.score is not None
                    },
                )
            )
    return rows


def ordered(config: SmartSearchConfig, rows: list[CandidateRow]) -> list[CandidateRow]:
    """Ranked best first (scalar goal) or the Pareto front (Pareto goal)."""
    by_candidate = {id(r.candidate): r for r in rows}
    candidates = [r.candidate for r in rows]
    if config.goal.is_pareto:
        chosen = pareto_front(candidates, config.goal.resolved_pareto_objectives)
    else:
        chosen = rank(candidates)
    return [by_candidate[id(c)] for c in chosen]


def apply_finish(best: list[CandidateRow], finish: FinishResult) -> list[CandidateRow]:
    """The ranking with the finished top first, in the order its fresh samples give (the recommendation
    first), then the rest in the search's order."""
    if not finish.deployments:
        return best
    by_key = {row.key: row for row in best}
    ranks = [rank for rank in judge(finish).ranks if rank.key in by_key]
    top = [by_key[rank.key].model_copy(update={"finish": rank}) for rank in ranks]
    finished = {rank.key for rank in ranks}
    return top + [row for row in best if row.key not in finished]


def frame(rows: list[CandidateRow], with_rank: bool = False) -> pd.DataFrame:
    records = []
    ties = same_result_as(rows)
    for position, row in enumerate(rows, start=1):
        c = row.candidate
        out: dict[str, Any] = {"rank": position, "same_result_as": ties[position - 1]} if with_rank else {}
        out.update(
            branch=row.branch,
            round=row.round,
            key=row.key,
            score=c.score,
            used_gpus=c.used_gpus,
            **role_skus(row.branch, c.config),
            average_gpus=row.average_gpus,
            selections=row.selections,
            notes="; ".join(row.notes) or None,
        )
        if row.finish is not None:
            f = row.finish
            out.update(
                fresh_statistic=f.statistic,
                fresh_mean=f.mean,
                fresh_sd=f.sd,
                fresh_worst=f.worst,
                fresh_samples=f.samples,
                fresh_feasible=f.scored,
                behind_leader=f.behind,
                behind_best_low=f.behind_low,
                behind_best_high=f.behind_high,
                verdict=f.verdict,
                p_best=f.p_best,
                recommended=f.recommended,
                **{f"fresh_{name}": value for name, value in f.metrics.items()},
            )
        if row.binding_workload is not None:
            out["binding_workload"] = row.binding_workload
            out.update({f"score_{name}": value for name, value in row.workload_scores.items()})
        out.update({f"objective_{k}": v for k, v in (c.objectives or {}).items()})
        out.update({k: c.metrics.get(k) for k in HEADLINE_METRICS})
        out.update({f"config_{k}": _cell(v) for k, v in c.config.items()})
        records.append(out)
    table = pd.DataFrame(records)
    if with_rank and len(table):
        table["same_result_as"] = table["same_result_as"].astype("Int64")  # a rank, or empty
    for column in ("fresh_samples", "fresh_feasible"):  # a count, or empty below the finished top
        if column in table:
            table[column] = table[column].astype("Int64")
    for column in ("recommended",):
        if column in table:
            table[column] = table[column].astype("boolean")
    return table


def role_skus(mode: str, sample: dict[str, Any]) -> dict[str, str | None]:
    """The GPU type of each role as replayed (an agg deployment names its one type in both)."""
    prefill, decode = ("sku", "sku") if mode == "agg" else ("prefill_sku", "decode_sku")
    run_sku = sample.get("hardware_sku")
    return {"prefill_sku": sample.get(prefill) or run_sku, "decode_sku": sample.get(decode) or run_sku}


def same_result_as(rows: list[CandidateRow]) -> list[int | None]:
    """Per row, the rank of the first earlier row with the same outcome (trial/outcome.py), else None."""
    return first_same([row_outcome(row) for row in rows])


def row_outcome(row: CandidateRow) -> list:
    c = row.candidate
    return outcome(c.score, c.used_gpus, c.metrics, row.workload_scores)


def _cell(value: Any) -> Any:
    # Composite entries may be dicts; one column type per file keeps Parquet and CSV readable.
    return json.dumps(value, sort_keys=True) if isinstance(value, dict | list) else value
