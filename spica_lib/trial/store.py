"""Where trials are kept: a replay job's trials (journal first, then the trial file), reading records back."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Literal

from spica_lib.base.artifacts import read_model, write_model
from spica_lib.trial.evaluate import evaluate_trials, killed_outside
from spica_lib.trial.screen import PruneBar
from spica_lib.trial.spec import TrialRecord, TrialSpec

Source = Literal["journal", "replayed", "killed"]


def run_replay_job(
    specs: dict[str, TrialSpec],
    journal: Callable[[str], str | Path],
    started: Callable[[str], str | Path],
    attempt: int,
    last_attempt: int,
    *,
    max_eval_seconds: float | None = None,
    parallel: int = 1,
    on_warm: Callable[[float], None] | None = None,
    prune: PruneBar | Mapping[str, PruneBar] | None = None,
    prefix_seconds: float | None = None,
) -> Iterator[tuple[TrialRecord, Source]]:
    """The trials of one replay job (key -> spec), each yielded with where its record came from.

    `prune` is the round's bar (RoundSuggestions.prune) and `prefix_seconds` its prefix budget: fixed when the
    round was suggested, so a retried or resumed job judges its trials against the same bar and budget as the
    first attempt.

    Every finished trial is journaled (`journal(key)`) before it is yielded for its trial file.
    Snakemake deletes the output of a job it sees fail, also when a cancel or time limit hits
    after the replays, so a retried or resumed job restores journaled records instead of
    replaying them. A trial is marked (`started(key)`) when its child is forked; on the last allowed
    attempt, a trial an earlier job started but never finished was killed from outside (a time
    limit, a node failure, a cancel, the OOM killer): that is recorded (`killed_outside`) instead
    of replaying it again. Trials never started are replayed.
    """
    pending: dict[str, TrialSpec] = {}
    for key, spec in specs.items():
        restored = _restore(Path(journal(key)), key, spec)
        if restored is not None:
            yield restored, "journal"
        elif 1 < attempt >= last_attempt and Path(started(key)).exists():
            job_error = Path(started(key)).read_text(encoding="utf-8").strip()
            record = TrialRecord(key=key, spec=spec, result=killed_outside(spec, attempt, job_error))
            yield _journaled(journal, started, record), "killed"
        else:
            pending[key] = spec

    def mark(key: str) -> None:
        Path(started(key)).parent.mkdir(parents=True, exist_ok=True)
        Path(started(key)).touch()

    results = evaluate_trials(
        pending,
        max_eval_seconds=max_eval_seconds,
        parallel=parallel,
        warm=True,
        on_warm=on_warm,
        on_start=mark,
        prune=prune,
        prefix_seconds=prefix_seconds,
    )
    for key, result in results:
        record = TrialRecord(key=key, spec=pending[key], result=result)
        yield _journaled(journal, started, record), "replayed"


def _restore(path: Path, key: str, spec: TrialSpec) -> TrialRecord | None:
    if not path.exists():
        return None
    record = read_trial(path)
    return record if record.key == key and record.spec == spec else None


def _journaled(
    journal: Callable[[str], str | Path], started: Callable[[str], str | Path], record: TrialRecord
) -> TrialRecord:
    write_model(journal(record.key), record)
    Path(started(record.key)).unlink(missing_ok=True)
    return record


def read_trial(path: str | Path) -> TrialRecord:
    return read_model(path, TrialRecord)


def read_trials(paths: dict[str, str | Path]) -> dict[str, TrialRecord]:
    """The stored trials, by key, from the files a run's layout names (each must exist)."""
    return {key: read_trial(path) for key, path in paths.items()}


def note_job_error(started_markers: list[str | Path], error: BaseException) -> None:
    """Write why a replay job is dying into the markers of its unfinished trials, for the last attempt's reason."""
    text = f"{type(error).__name__}: {error}".strip()
    for marker in started_markers:
        if Path(marker).exists():
            Path(marker).write_text(text + "\n", encoding="utf-8")
