"""Benchmark: what the finish's rare-event check (goal.rare_event_share) costs on the default sweep and the trace
example.

Results: docs/benchmarks/finish.md, "What the rare-event check costs".

Each config is run once with `spica run` (its search, as a user runs it). Its finish is then run again in this
process from that search's top deployments (`run_finish` from the run's own records, as the finish job takes them:
run/jobs/ranked.py), with real replays, twice side by side:
  default  goal.rare_event_share at its default (10 %): an equivalence needs 42 compared samples;
  off      goal.rare_event_share 0.99: one sample resolves it, so the check never asks for more (the finish as it was
           before the check, but for the family's error split, which is the same in both).
Printed per config and setting: the finish's replays, its samples per deployment (fewest-most), the finish's wall
seconds (median of `--repeats`, each with no replay cached) and its recommendation with the first words of its
sentence. The replays are deterministic for a search (the same samples), so their counts are the cost; the seconds
are what they took here.

Run: .venv/bin/python bench/rare_event_cost.py [--configs default,trace] [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import yaml

os.environ.setdefault("DYN_LOG", "error")
REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from timed_sweep import timed_sweep  # noqa: E402

from spica_lib.config import SmartSearchConfig  # noqa: E402
from spica_lib.config.finish_settings import rare_event_share  # noqa: E402
from spica_lib.results.confidence import judge  # noqa: E402
from spica_lib.results.merge import ordered  # noqa: E402
from spica_lib.results.sequential import run_finish  # noqa: E402
from spica_lib.run.jobs.ranked import RankedRun, finish_top  # noqa: E402
from spica_lib.run.view import RunView  # noqa: E402
from spica_lib.trial.evaluate import evaluate_trials  # noqa: E402

CONFIGS = {"default": REPO / "config" / "default.yaml", "trace": REPO / "config" / "examples" / "trace.yaml"}
SETTINGS = {"default": None, "off": 0.99}


def config_data(name: str) -> dict:
    path = CONFIGS[name]
    data = yaml.safe_load(path.read_text())
    trace = data.get("workload", {}).get("trace_path")
    if trace:
        data["workload"]["trace_path"] = str((path.parent / trace).resolve())
    return data


def searched(run: Path) -> tuple[SmartSearchConfig, dict]:
    """The run's config and its finish's top deployments (key -> spec and search result)."""
    view = RunView(run)
    ranked = RankedRun(view.config, view.histories, view.records, view.rows, ordered(view.config, view.rows))
    return view.config, {key: (spec, view.records[key].result) for key, spec in finish_top(ranked).items()}


def with_share(config: SmartSearchConfig, share: float | None) -> SmartSearchConfig:
    data = config.model_dump(mode="json", exclude_none=True)
    data.pop("dgdr", None)
    data["goal"]["rare_event_share"] = share
    if share is None:
        data["goal"].pop("rare_event_share")
    return SmartSearchConfig.from_mapping(data)


def timed_finish(config: SmartSearchConfig, top: dict) -> tuple[float, object]:
    limit = config.sweep.max_eval_seconds

    def replay(specs):
        return dict(evaluate_trials(specs, max_eval_seconds=limit, parallel=2, warm=True))

    started = time.perf_counter()
    result = run_finish(config, top, replay)
    return time.perf_counter() - started, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--configs", default="default,trace")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print("| config | rare_event_share | finish replays | samples per deployment | finish seconds (median) | "
          "recommended | sentence begins |")  # fmt: skip
    print("|---|---|---:|---|---:|---|---|")
    for name in args.configs.split(","):
        wall, (config, top) = timed_sweep(config_data(name), 2, searched)
        for label, share in SETTINGS.items():
            cfg = with_share(config, share)
            runs = [timed_finish(cfg, top) for _ in range(args.repeats)]
            result = runs[0][1]
            replays = sum(s.replayed for d in result.deployments for s in d.samples)
            low, high = result.samples_used
            verdict = judge(result)
            words = " ".join(verdict.sentence.split()[:14])
            print(f"| {name} | {label} ({rare_event_share(cfg):g}) | {replays} | {low}-{high} | "
                  f"{statistics.median(t for t, _ in runs):.1f} | {verdict.ranks[0].key[:12]} | {words} … |", flush=True)  # fmt: skip
        print(f"({name}: the sweep itself took {wall:.0f} s)", flush=True)


if __name__ == "__main__":
    main()
