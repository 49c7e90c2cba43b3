"""Where this process keeps the files drawn from a sweep's traces: each trace's scan and its resamples.

A sweep keeps them in its run's folder (`RunFiles.trace_scans`, `RunFiles.trace_resamples`): whoever runs one of
its jobs names them here from the job's run folder (spica_lib/host/registry.py, from the job's `run_dir` param)
and the Snakefile from the run it planned, for its own process. No job takes them from the environment.
Outside a sweep none is named: no scan is kept and a resample goes under the held-out splits' root.
"""

from __future__ import annotations

from typing import NamedTuple


class TraceFolders(NamedTuple):
    scans: str | None = None  # where kept scans live (traces/scan.py: keep_scan); None: nothing kept
    resamples: str | None = None  # where resamples and the search's sample live (traces/resample.py); None: the splits' root


_IN_USE = [TraceFolders()]

# The one folder handed through the environment, where RunFiles cannot give it: a cluster job's own Snakemake
# validates the config again before it knows its run (the run's id is the hash of the traces it would scan), so
# the main invocation leaves its kept scans' folder here for that parse (workflow/Snakefile) and nothing else.
PARSE_SCANS_ENV = "SPICA_PARSE_TRACE_SCANS"


def trace_folders() -> TraceFolders:
    """The folders this process uses now."""
    return _IN_USE[0]


def use_trace_folders(folders: TraceFolders) -> TraceFolders:
    """Use `folders` from now on in this process (and the processes it forks); returns the ones used before."""
    before, _IN_USE[0] = _IN_USE[0], folders
    return before
