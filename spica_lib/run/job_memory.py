"""How much memory a cluster job that replays asks for (SLURM's `mem_mb`), from what it replays.

A replay keeps the token ids of every request it was given, so its peak resident memory grows with
the workload's input tokens: about 4.1 bytes per input token over some 180 MiB (bench/day_trace.py,
docs/benchmarks/scale.md, "Day-scale traces": 909 MiB at 185 M tokens, 6.2 GiB at 1.5 G). A day of the
shipped trace's traffic (500k requests, 7.7 G tokens) needs about 30 GiB per replay. Each replay
running at once in a job needs its own: the job asks for its replays times what the largest workload
needs, with a quarter on top, and never less than the 4000 MB per replay it always asked for.
"""

from __future__ import annotations

import functools
import math
import subprocess
from collections.abc import Callable
from typing import NamedTuple

from spica_lib.config import SmartSearchConfig, Workload

FLOOR_MB_PER_REPLAY = 4000
BASE_MIB, BYTES_PER_INPUT_TOKEN, MARGIN = 180.0, 4.1, 1.25


def replay_mb(input_tokens: int | None) -> int:
    """MB one replay running at once asks for, given the input tokens of the largest workload (None: unknown)."""
    if input_tokens is None:
        return FLOOR_MB_PER_REPLAY
    need_mib = BASE_MIB + BYTES_PER_INPUT_TOKEN * input_tokens / 2**20
    return max(FLOOR_MB_PER_REPLAY, math.ceil(MARGIN * need_mib * 2**20 / 1e6))


def largest_input_tokens(config: SmartSearchConfig) -> int | None:
    """The input tokens of the run's largest replay workload, or None when one is sized per candidate."""
    counts = [_input_tokens(w) for w in config.workloads or [config.workload]]
    return None if None in counts else max(counts)


def search_input_tokens(config: SmartSearchConfig) -> int | None:
    """The input tokens of the search's largest replay: a sampled trace's share of the whole (the post-search
    jobs replay the whole trace: `largest_input_tokens`)."""
    workload = config.workload
    if workload.search_requests is None or not workload.is_trace_based:
        return largest_input_tokens(config)
    from spica_lib.traces.scan import scan_trace

    scan = scan_trace(workload.trace_path)
    return math.ceil(scan.input_tokens * min(1.0, workload.search_requests / max(1, scan.records)))


def _input_tokens(workload: Workload) -> int | None:
    if workload.is_trace_based:
        from spica_lib.traces.scan import scan_trace

        return scan_trace(workload.trace_path).input_tokens  # a held-out split replays fewer
    requests = workload.expected_requests()
    return None if requests is None or workload.isl is None else requests * workload.isl


def machine_refusal(replay_mb_needed: int, machine_mb: int) -> str | None:
    """Why one replay of the whole traffic cannot run on this machine (a local run), or None: refused before any
    compute, with the size it needs, rather than killed by the kernel an hour in."""
    if replay_mb_needed <= machine_mb:
        return None
    return (f"one replay of the whole traffic needs about {replay_mb_needed} MB (run/job_memory.py: {BYTES_PER_INPUT_TOKEN} "
            f"bytes per input token, with a {MARGIN:g}x margin) and this machine has {machine_mb} MB: run it on a "
            "cluster (profiles/slurm asks each job for its size), or replay a shorter trace")  # fmt: skip


class JobAsk(NamedTuple):
    """What one replaying job asks SLURM for: `mem_mb` (its setting, or `replays` x `per_replay_mb`) on
    `partition` (None: the cluster's default)."""

    mem_mb: int
    partition: str | None
    replays: int  # replays at once: the job's threads
    per_replay_mb: int  # what one of its replays needs (the search's: its sample's; every other job's: the whole)


def cluster_refusal(asks: dict[str, JobAsk], node_mb: Callable[[str | None], int | None]) -> str | None:
    """Why SLURM would never start one of the run's replaying jobs, or None. `node_mb` gives a partition's largest
    node (None: not known, so not judged). Refused before any compute, with the size it needs, rather than left
    pending in the queue after the search."""
    for job, ask in sorted(asks.items()):
        largest = node_mb(ask.partition)
        if largest is None or ask.mem_mb <= largest:
            continue
        where = f"partition {ask.partition}" if ask.partition else "the cluster's default partition"
        needs = ask.replays * ask.per_replay_mb
        if ask.per_replay_mb > largest:
            fix = (f"one of its replays alone needs about {ask.per_replay_mb} MB ({BYTES_PER_INPUT_TOKEN} bytes per "
                   f"input token, with a {MARGIN:g}x margin): give it a partition with larger nodes "
                   f"(set-resources {job}:slurm_partition=...), or replay a shorter trace")  # fmt: skip
        elif ask.mem_mb > needs:
            fix = f"lower set-resources {job}:mem_mb (its {ask.replays} replay(s) at once need about {needs} MB)"
        else:
            fix = (f"give it fewer replays at once (set-threads {job}: {largest // ask.per_replay_mb}, "
                   f"{ask.per_replay_mb} MB each) or a partition with larger nodes")  # fmt: skip
        return (f"the {job} job asks SLURM for {ask.mem_mb} MB and the largest node of {where} has {largest} MB, "
                f"so it would never start: {fix}")  # fmt: skip
    return None


def largest_node_mb(sinfo_lines: list[str], partition: str | None) -> int | None:
    """The memory (MB) of a partition's largest node from `sinfo -h -N -o "%P %m"` lines (the default partition
    is the one SLURM marks with *), or None when it is not listed."""
    sizes = []
    for line in sinfo_lines:
        fields = line.split()
        if len(fields) != 2:
            continue
        name, memory = fields
        chosen = name.endswith("*") if partition is None else name.rstrip("*") == partition
        if chosen and memory.rstrip("+").isdigit():
            sizes.append(int(memory.rstrip("+")))
    return max(sizes) if sizes else None


def slurm_node_mb(partition: str | None) -> int | None:
    """The largest node's memory in a partition of the cluster this machine submits to, or None when sinfo cannot
    say (no sinfo here: the submission then fails with SLURM's own error)."""
    return largest_node_mb(list(_sinfo_nodes()), partition)


@functools.cache
def _sinfo_nodes() -> tuple[str, ...]:
    """`sinfo`'s node lines, asked once per process (every replaying job is judged against the same answer)."""
    try:
        listed = subprocess.run(["sinfo", "-h", "-N", "-o", "%P %m"], capture_output=True, text=True, timeout=30,
                                check=True)  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return ()
    return tuple(listed.stdout.splitlines())
