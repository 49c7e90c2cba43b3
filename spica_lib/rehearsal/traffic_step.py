"""`python -m spica_lib.rehearsal.traffic_step OPEN CLOSED URL MODEL MODEL_DIR OUT SPEEDUP`: a rehearsal's traffic, its
open loop then its closed loop, sent from a SLURM step (rehearsal/on_slurm.py) once the deployment serves MODEL
(its tokenizer in MODEL_DIR); each run's timings and load, and the registered workers, go to OUT.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import urllib.request
from pathlib import Path

from spica_lib.base.artifacts import atomic_write_text
from spica_lib.rehearsal.client import ClientRun, LiveRequest, send_traffic, warm_up
from spica_lib.rehearsal.model_folder import vocabulary_size
from spica_lib.rehearsal.traffic import RehearsalTraffic


def main(open_path: str, closed_path: str, url: str, model: str, model_dir: str, out: str, speedup: str) -> None:
    runs = []
    words = vocabulary_size(Path(model_dir))
    for path in (open_path, closed_path):
        traffic = RehearsalTraffic.model_validate_json(Path(path).read_text(encoding="utf-8"))
        if not runs:
            warm_up(url, model, traffic, words)
        runs.append(dataclasses.asdict(send_traffic(url, model, traffic, words, float(speedup))))
    with urllib.request.urlopen(f"{url}/health", timeout=10) as response:
        health = json.loads(response.read())
    components = {str(i.get("instance_id")): str(i.get("component")) for i in health.get("instances", [])}
    atomic_write_text(Path(out), json.dumps({"runs": runs, "components": components}))


def read_runs(data: dict) -> list[ClientRun]:
    """OUT's runs, read back."""
    return [ClientRun(**{**run, "requests": [LiveRequest(**r) for r in run["requests"]]}) for run in data["runs"]]


if __name__ == "__main__":
    main(*sys.argv[1:8])
