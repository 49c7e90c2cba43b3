"""Benchmark: does multi-token prediction win, and how far does that rest on the acceptance rate?
(docs/benchmarks/mtp.md)

1. The example sweep, config/examples/mtp.yaml (DeepSeek-V3 on 8 H200, vLLM, agg, 0-3 MTP draft tokens searched
   with max_num_seqs, goodput per GPU under TTFT <= 2 s and ITL <= 25 ms), run whole with `run_smart_search`:
   its recommendation, how many tokens it drafts, and the acceptance rates its drafts were replayed at.
2. The recommendation's layout and engine limits replayed with 0, 1, 2 and 3 draft tokens at several stated
   acceptance rates (entry i: P(draft i accepted | every draft before it was)): the pinned mocker's own
   (0.85, 0.3, 0), and lower ones a model or traffic may well have. Each row prints the rates beside the score.

Run: .venv/bin/python bench/mtp.py [--keep DIR]  (about two minutes on 2 cores)
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("DYN_LOG", "error")
REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from spica_lib.api import run_smart_search  # noqa: E402
from spica_lib.config import SmartSearchConfig  # noqa: E402
from spica_lib.config.input_kind import read_yaml_mapping  # noqa: E402
from spica_lib.trial.evaluate import evaluate_trials, prepare_trial  # noqa: E402

EXAMPLE = REPO / "config" / "examples" / "mtp.yaml"
# Stated acceptance rates (per draft position): the mocker's own, then lower ones.
RATES = ([0.85, 0.3, 0.0], [0.6, 0.2, 0.0], [0.3, 0.1, 0.0])
DRAFTS = (0, 1, 2, 3)


def sweep(workdir: Path) -> tuple[dict, str]:
    """The example's recommendation (its trial spec's selection and layout) and its summary's MTP line."""
    outcome = run_smart_search(EXAMPLE, workdir=workdir, cores=2)
    best = outcome.best
    print(f"run {outcome.run_dir.name}: recommendation {best.key[:12]}, goodput/GPU {best.candidate.score:.2f} "
          f"on the search's sample")  # fmt: skip
    print(f"MTP: {outcome.summary.mtp_note}")
    from spica_lib.trial.store import read_trial

    trial = next(outcome.run_dir.glob(f"rounds/*/*/trials/**/{best.key}.json"))
    return read_trial(trial).spec.model_dump(), outcome.summary.mtp_note or ""


def sensitivity(spec: dict) -> list[tuple[list[float], int, float | None, float | None, float | None]]:
    """The recommendation replayed at each draft count and stated acceptance."""
    data = read_yaml_mapping(EXAMPLE)
    rows, specs = [], {}
    for rates in RATES:
        space = {**data["search_space"], "nextn_accept_rates": rates}
        config = SmartSearchConfig.from_mapping({**data, "search_space": space})
        for drafts in DRAFTS:
            selection = {**spec["selection"], "agg_nextn": drafts}
            version = spec["sample"]["backend_version"]
            trial = prepare_trial(config, selection, spec["parallel_config"], backend_version=version)
            specs[(tuple(rates), drafts)] = trial
    unique = {trial.key(): trial for trial in specs.values()}  # no drafts: the same replay at every rate
    results = dict(evaluate_trials(unique, parallel=2, warm=True))
    for (rates, drafts), trial in specs.items():
        result = results[trial.key()]
        metrics = result.metrics
        rows.append((list(rates), drafts, result.score, metrics.get("mean_itl_ms"), metrics.get("sla_coverage")))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", type=Path, help="run the sweep in this folder and keep it")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="spica-mtp-") as scratch:
        workdir = args.keep or Path(scratch)
        workdir.mkdir(parents=True, exist_ok=True)
        spec, _ = sweep(workdir)
    from spica_lib.facts.parallel import ReplicaConfig

    spec["parallel_config"] = ReplicaConfig.model_validate(spec["parallel_config"])
    print()
    print("| acceptance rates | draft tokens | goodput/GPU (tok/s) | mean ITL (ms) | within SLA |")
    print("|---|---:|---:|---:|---:|")
    for rates, drafts, score, itl, coverage in sensitivity(spec):
        shown = "—" if drafts == 0 else f"{rates[:drafts]}"
        print(f"| {shown} | {drafts} | {score:.1f} | {itl:.1f} | {100 * coverage:.0f} % |")


if __name__ == "__main__":
    main()
