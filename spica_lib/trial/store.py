"""Where trials are kept: the trial job (journal first, then the trial file), reading records back."""

from __future__ import annotations

from pathlib import Path

from spica_lib.base.artifacts import read_model, write_model
from spica_lib.trial.evaluate import evaluate_trial, killed_outside
from spica_lib.trial.spec import TrialRecord, TrialSpec


def run_trial_job(
    spec: TrialSpec,
    key: str,
    journal: str | Path,
    attempt: int,
    last_attempt: int,
    *,
    max_eval_seconds: float | None = None,
) -> tuple[TrialRecord, bool]:
    """What a trial job writes, and whether it came from the journal rather than a replay now.

    Every finished trial is journaled before its output is written. Snakemake deletes the output of a
    job it sees fail — also when a cancel or time limit hits between the write and the job's exit —
    so a retried or resumed job restores the journaled record instead of replaying it again.
    On a retry that is the last allowed attempt, with nothing journaled, the earlier jobs were
    killed from outside; that is recorded (see `killed_outside`) so the round can be told.
    """
    journal = Path(journal)
    if journal.exists():
        record = read_trial(journal)
        if record.key == key and record.spec == spec:
            return record, True
    if 1 < attempt >= last_attempt:
        result = killed_outside(spec, attempt)
    else:
        result = evaluate_trial(spec, max_eval_seconds=max_eval_seconds)
    record = TrialRecord(key=key, spec=spec, result=result)
    write_model(journal, record)
    return record, False


def read_trial(path: str | Path) -> TrialRecord:
    return read_model(path, TrialRecord)


def read_trials(paths: dict[str, str | Path]) -> dict[str, TrialRecord]:
    """The stored trials, by key, from the files a run's layout names (each must exist)."""
    return {key: read_trial(path) for key, path in paths.items()}
