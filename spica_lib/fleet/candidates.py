"""A model's candidates for the split, read from its finished run.

Three kinds, as the split needs them:

- the finished top the run bisected (capacity.json): capacity = the highest load factor confirmed on
  every one of its fresh samples (the bisection's found load, else the step below it; neither: the
  offered rate) times the offered rate: a load the bisection found but a fresh sample missed is not one;
- the best-ranked deployment on each GPU type (each set of types a layout takes) that the bisection
  did not size, so that a scarce type cannot make the split infeasible when another would do. Its
  capacity is the offered rate it met in the search (factor 1: a ranked deployment met the SLA
  there) - a floor, never more than was replayed;
- the rest of the finished top (sweep.finish_top), with the same floor.

Each replica's GPUs by type and its price per hour come from its layout and the fleet's prices.
"""

from __future__ import annotations

from pathlib import Path

from spica_lib.fleet.config import gpus_by_type
from spica_lib.fleet.split import SplitCandidate
from spica_lib.run.view import RunView


def model_candidates(run_dir: str | Path, prices: dict[str, float]) -> tuple[list[SplitCandidate], dict[str, str]]:
    """(candidates, key -> where its capacity comes from) of one model's finished run."""
    view = RunView(run_dir)
    sku = view.config.search_space.hardware_sku
    capacity = view.capacity
    offered = capacity.offered_rps if capacity is not None else None
    if not offered:
        raise ValueError(f"{run_dir}: no capacity.json with an offered rate; the split needs each model's capacity")
    found: dict[str, SplitCandidate] = {}
    source: dict[str, str] = {}

    def add(key: str, factor: float, why: str) -> None:
        layout = view.records[key].spec.parallel_config
        gpus = gpus_by_type(layout, sku)
        found[key] = SplitCandidate(
            key=key,
            label=layout.label(),
            capacity_rps=factor * offered,
            gpus=gpus,
            usd_per_hour=sum(prices[s] * n for s, n in gpus.items()),
        )
        source[key] = why

    for deployment in capacity.deployments:
        factor = deployment.usable_factor  # the confirmed capacity: a bisected load a fresh sample missed is not one
        found_at = f"bisected: {factor:.3g}x the offered rate, confirmed on fresh samples"
        if factor != deployment.capacity_factor:
            found_at = (
                f"bisected to {deployment.capacity_factor:.3g}x the offered rate, not confirmed there: "
                f"{factor:.3g}x{' (the offered rate)' if deployment.confirmed_factor is None else ', confirmed'}"
            )
        add(deployment.key, factor, found_at)
    best_by_types: dict[tuple[str, ...], str] = {}
    for row in view.ranked:
        types = tuple(sorted(gpus_by_type(view.records[row.key].spec.parallel_config, sku)))
        best_by_types.setdefault(types, row.key)
    for types, key in best_by_types.items():
        if key not in found:
            add(key, 1.0, f"best on {'+'.join(types)}, not bisected: the offered rate it met")
    for row in view.ranked[: view.config.sweep.finish_top or 0]:
        if row.key not in found:
            add(row.key, 1.0, "of the finished top, not bisected: the offered rate it met")
    return list(found.values()), source

