"""How much memory a cluster job that replays asks for (SLURM's `mem_mb`), from what it replays.

A replay keeps the token ids of every request it was given, so its peak resident memory grows with
the workload's input tokens: about 4.1 bytes per input token over some 180 MiB (bench/day_trace.py,
docs/benchmarks/scale.md, "Day-scale traces": 909 MiB at 185 M tokens, 6.2 GiB at 1.5 G). A day of the
shipped trace's traffic (500k requests, 7.7 G tokens) needs about 30 GiB per replay. Each replay
running at once in a job needs its own: the job asks for its replays times what the largest workload
needs, with a quarter on top, and never less than the 4000 MB per replay it always asked for.
"""

from __future__ import annotations

import math

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
    from spica_lib.config.trace import scan_trace

    scan = scan_trace(workload.trace_path)
    return math.ceil(scan.input_tokens * min(1.0, workload.search_requests / max(1, scan.records)))


def _input_tokens(workload: Workload) -> int | None:
    if workload.is_trace_based:
        from spica_lib.config.trace import scan_trace

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
