"""Where trials are kept: the trial job (journal first, then the trial file), reading records back."""

from __future__ import annotations

from pathlib import Path

from spica_lib.base.artifacts import read_model, write_model
from spica_lib.trial.evaluate import evaluate_trial, killed_outside
from spica_lib.trial.spec import TrialRecord, TrialResult, TrialSpec


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


def trial_path(folder: str | Path, key: str) -> Path:
    return Path(folder) / f"{key}.json"


def write_trial(folder: str | Path, spec: TrialSpec, result: TrialResult) -> Path:
    key = spec.key()
    path = trial_path(folder, key)
    write_model(path, TrialRecord(key=key, spec=spec, result=result))
    return path


def read_trial(path: str | Path) -> TrialRecord:
    return read_model(path, TrialRecord)


def load_records(run_dir: str | Path, keys: list[str]) -> dict[str, TrialRecord]:
    """The stored trials for `keys` (each must exist), wherever their round put them in `run_dir`."""
    found = {path.stem: path for path in sorted(Path(run_dir).glob("rounds/*/*/trials/*.json"))}
    missing = [key for key in keys if key not in found]
    if missing:
        raise FileNotFoundError(f"no trial file under {run_dir}/rounds for key(s) {', '.join(missing)}")
    return {key: read_trial(found[key]) for key in dict.fromkeys(keys)}


def write_spec_once(path: str | Path, spec: TrialSpec) -> None:
    """Write a spec file unless it exists: its name is its content hash, so a rewrite would only
    touch its time stamp — and make the workflow replay a finished trial again."""
    if not Path(path).exists():
        write_model(path, spec)
