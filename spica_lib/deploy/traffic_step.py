"""`python -m spica_lib.deploy.traffic_step TRAFFIC URL MODEL OUT SPEEDUP`: a rehearsal's traffic, sent from a
SLURM step (deploy/rehearse_slurm.py) once the deployment serves; the timings and the registered workers go to OUT.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import urllib.request
from pathlib import Path

from spica_lib.base.artifacts import atomic_write_text
from spica_lib.deploy.live_client import send_traffic
from spica_lib.deploy.model_folder import vocabulary_size
from spica_lib.deploy.rehearsal_traffic import RehearsalTraffic


def main(traffic_path: str, url: str, model: str, out: str, speedup: str) -> None:
    traffic = RehearsalTraffic.model_validate_json(Path(traffic_path).read_text(encoding="utf-8"))
    sent = send_traffic(url, model, traffic, vocabulary_size(Path(model)), float(speedup))
    with urllib.request.urlopen(f"{url}/health", timeout=10) as response:
        health = json.loads(response.read())
    components = {str(i.get("instance_id")): str(i.get("component")) for i in health.get("instances", [])}
    atomic_write_text(
        Path(out), json.dumps({"requests": [dataclasses.asdict(r) for r in sent], "components": components})
    )


if __name__ == "__main__":
    main(*sys.argv[1:6])
