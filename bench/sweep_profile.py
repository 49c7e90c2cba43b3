"""Benchmark: where each second of the default sweep goes (`spica run config/default.yaml --cores 2`, from scratch).

Two variants, 3 runs each: aiconfigurator's answer cached (its cache filled by a first sweep) and searched
(an empty cache, as on a first run). Each run's wall is split over what ran at each moment, read back from
the run's own files: Snakemake's job records (`.snakemake/metadata/`: each job's start and end), the
round files (the optimizer's seconds and the static estimate's), the replay jobs' logs (the warm-up and
each trial's replay) and aiconfigurator's pick (its search's seconds). A moment when k jobs run is shared
equally between them; a job's share is split over its parts in proportion to their seconds, and what is
left of a job is its process start, imports and files. A moment when no job runs is Snakemake's: its start
(before the first job), its scheduling between jobs (checkpoint DAG updates, job spawns), its end. Printed:
per part, the median over the runs of its seconds of wall, and of its seconds on the critical path (from the
last job back, each time the job that ended last before it started); the walls; and how many of the 2 cores
were busy with a job.
Timings under load are distorted; the split shows where the time goes, and the medians are for a quiet
machine.

Run: .venv/bin/python bench/sweep_profile.py [--runs N] [--variants cached,searched]
"""

from __future__ import annotations

import argparse
import base64
import itertools
import json
import re
import statistics
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import yaml
from timed_sweep import timed_sweep

REPO = Path(__file__).resolve().parents[1]
CORES = 2
BEFORE_ROUND_0 = ("validate", "policies", "branches", "load_predictor")
AFTER_SEARCH = ("finish", "stress", "capacity", "baselines")
SNAKEMAKE_PARTS = ("Snakemake: start, before the first job", "Snakemake: between jobs (no job running)",
                   "Snakemake: end, after the last job")  # fmt: skip


class Job:
    """One job of the run: its rule, start and end (epoch seconds), and its parts (name -> seconds)."""

    def __init__(self, rule: str, start: float, end: float, outputs: list[str], log: list[str]):
        self.rule, self.start, self.end, self.outputs, self.log = rule, start, end, outputs, log
        self.parts: dict[str, float] = {}


def jobs_of(folder: Path) -> list[Job]:
    """Every job Snakemake ran in `folder`, from its metadata records (one per output file)."""
    found: dict[tuple[str, ...], Job] = {}  # by rule and log files: every job of the workflow has its own log
    root = folder / ".snakemake" / "metadata"
    for record in (path for path in root.rglob("*") if path.is_file()):
        data = json.loads(record.read_text())
        # The record's name is the output's path, URL-safe base64, long ones cut into folders named "@...".
        encoded = "".join(part.lstrip("@") for part in record.relative_to(root).parts)
        job = found.setdefault(
            (data["rule"], *(data.get("log") or [str(data["starttime"])])),
            Job(data["rule"], data["starttime"], data["endtime"], [], data.get("log") or []),
        )
        job.outputs.append(base64.urlsafe_b64decode(encoded).decode())
    return sorted(found.values(), key=lambda j: j.start)


def _seconds(text: str, pattern: str) -> list[float]:
    return [float(s) for s in re.findall(pattern, text)]


def add_parts(folder: Path, job: Job) -> None:
    """What the job's own files say it spent, by part (the rest of its wall is its start and files)."""
    log = (folder / job.log[0]).read_text() if job.log and (folder / job.log[0]).is_file() else ""
    if job.rule in ("suggest", "refill"):
        path = next(folder / o for o in job.outputs if o.endswith("suggestions.json"))
        round_file = json.loads(path.read_text())
        estimate = (round_file.get("warm_start") or {}).get("estimate_seconds", 0.0) if not round_file["refill"] else 0
        # A suggest forked from the warm host finds the designer imported and round 0's estimate compiled there
        # (run/jobs/search.py: prepare_suggest); the round file's optimizer seconds count that time too.
        hosted = sum(_seconds(log, r"designer and static estimate prepared in ([0-9.]+) s"))
        job.parts["suggest: designer import and static estimate (warm start)"] = estimate + hosted
        job.parts["Vizier (designer built, told, asked)"] = round_file["optimizer_seconds"] - estimate - hosted
    elif job.rule == "replay":
        at_once = int((re.findall(r"trial\(s\) on .*?, (\d+) at once", log) or ["1"])[0])
        job.parts["replay jobs: warm-up (Dynamo, perf DBs)"] = sum(_seconds(log, r"ready after ([0-9.]+) s"))
        job.parts["replay jobs: the search's replays"] = sum(_seconds(log, r", ([0-9.]+) s wall\)")) / at_once
    elif job.rule == "aiconfigurator_pick":
        path = next(folder / o for o in job.outputs if o.endswith(".json"))
        job.parts["aiconfigurator's search"] = json.loads(path.read_text()).get("seconds", 0.0)


def category(job: Job) -> str:
    """The part a job's remaining wall (beyond its measured parts) counts under."""
    if job.rule in BEFORE_ROUND_0:
        return f"before round 0: {job.rule}"
    if job.rule in ("suggest", "refill"):
        return "suggest: job start and files"
    if job.rule == "replay":
        return "replay jobs: job start, files, waiting for a core"
    if job.rule == "aiconfigurator_pick":
        return "aiconfigurator's pick: job start and files"
    if job.rule in AFTER_SEARCH:
        return f"after the search: {job.rule}"
    return job.rule  # tell, merge, report


def split_wall(started: float, ended: float, jobs: list[Job]) -> dict[str, float]:
    """The wall from `started` to `ended`, split over what ran at each moment (see the module's note)."""
    out: dict[str, float] = defaultdict(float)
    first, last = min(j.start for j in jobs), max(j.end for j in jobs)
    out[SNAKEMAKE_PARTS[0]] += first - started
    out[SNAKEMAKE_PARTS[2]] += ended - last
    moments = sorted({j.start for j in jobs} | {j.end for j in jobs})
    for low, high in itertools.pairwise(moments):
        running = [j for j in jobs if j.start <= low and j.end >= high]
        if not running:
            out[SNAKEMAKE_PARTS[1]] += high - low
            continue
        for job in running:
            share = (high - low) / len(running) / max(job.end - job.start, 1e-9)  # of each second of the job
            measured = sum(job.parts.values())
            fit = min(1.0, (job.end - job.start) / measured) if measured else 1.0  # parts that overlap (threads)
            for part, seconds in job.parts.items():
                out[part] += share * seconds * fit
            out[category(job)] += share * max(0.0, job.end - job.start - measured * fit)
    return dict(out)


def critical_path(started: float, ended: float, jobs: list[Job]) -> dict[str, float]:
    """The wall along the chain of jobs that ended the sweep: from the last job back, each time the job that
    ended last before it started (what it waited for), split by part; the gaps between them are Snakemake's."""
    out: dict[str, float] = defaultdict(float)
    chain = [max(jobs, key=lambda j: j.end)]
    out[SNAKEMAKE_PARTS[2]] += ended - chain[0].end
    while True:
        job = chain[-1]
        before = [j for j in jobs if j.end <= job.start + 0.05 and j is not job and j not in chain]
        earlier = max(before, key=lambda j: j.end, default=None)
        out[SNAKEMAKE_PARTS[0] if earlier is None else SNAKEMAKE_PARTS[1]] += job.start - (
            started if earlier is None else min(earlier.end, job.start)
        )
        measured = sum(job.parts.values())
        fit = min(1.0, (job.end - job.start) / measured) if measured else 1.0
        for part, seconds in job.parts.items():
            out[part] += seconds * fit
        out[category(job)] += max(0.0, job.end - job.start - measured * fit)
        if earlier is None:
            return dict(out)
        chain.append(earlier)


def profile_run(data: dict, aic_cache: str) -> tuple[float, dict[str, float], dict[str, float], float]:
    """One sweep from scratch: (its wall, the wall split by part, the critical path by part, the mean number of
    busy cores)."""
    started = time.time()

    def read(run: Path) -> tuple[dict[str, float], dict[str, float], float]:
        folder = run.parents[1]
        jobs = jobs_of(folder)
        for job in jobs:
            add_parts(folder, job)
        ended = time.time()
        busy = sum(j.end - j.start for j in jobs) / (ended - started)
        return split_wall(started, ended, jobs), critical_path(started, ended, jobs), busy

    wall, (split, path, busy) = timed_sweep(data, CORES, read, env={"SPICA_AIC_CACHE": aic_cache})
    return wall, split, path, busy


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--variants", default="cached,searched")
    args = parser.parse_args()
    data = yaml.safe_load((REPO / "config" / "default.yaml").read_text())
    results = {}
    with tempfile.TemporaryDirectory() as shared:
        variants = args.variants.split(",")
        if "cached" in variants:
            timed_sweep(data, CORES, lambda run: None, env={"SPICA_AIC_CACHE": shared})  # fills the cache
        for variant in variants:
            runs = []
            for _ in range(args.runs):
                with tempfile.TemporaryDirectory() as empty:
                    runs.append(profile_run(data, shared if variant == "cached" else empty))
                print(f"{variant}: wall {runs[-1][0]:.1f} s", flush=True)
            results[variant] = runs
    parts = sorted({p for runs in results.values() for run in runs for p in (*run[1], *run[2])}, key=_order)
    names = list(results)
    walls = {n: statistics.median(run[0] for run in results[n]) for n in names}
    header = " | ".join(f"aiconfigurator {n}: share of wall, s (%) | on the critical path, s (%)" for n in names)
    print(f"\n| part (median of {args.runs} runs) | {header} |")
    print("|---|" + "---:|---:|" * len(names))
    for part in parts:
        cells = []
        for n in names:
            for view in (1, 2):
                seconds = statistics.median(run[view].get(part, 0.0) for run in results[n])
                cells.append(f"{seconds:.2f} ({100 * seconds / walls[n]:.0f} %)")
        print(f"| {part} | " + " | ".join(cells) + " |")
    runs = {n: [run[0] for run in results[n]] for n in names}
    print("| **wall, median** | " + " | ".join(f"**{walls[n]:.1f}** | " for n in names) + " |")
    print("| runs | " + " | ".join(", ".join(f"{w:.1f}" for w in runs[n]) + " | " for n in names) + " |")
    busy = {n: statistics.median(run[3] for run in results[n]) for n in names}
    print(f"| cores busy with a job, mean of {CORES} | " + " | ".join(f"{busy[n]:.2f} | " for n in names) + " |")


def _order(part: str) -> tuple[int, str]:
    ranks = [SNAKEMAKE_PARTS[0], "before round 0", "aiconfigurator", "suggest: designer", "Vizier", "suggest",
             "replay jobs", "tell", "refill", "after the search", "merge", "report", SNAKEMAKE_PARTS[1],
             SNAKEMAKE_PARTS[2]]  # fmt: skip
    return next((i for i, prefix in enumerate(ranks) if part.startswith(prefix)), len(ranks)), part


if __name__ == "__main__":
    main()
