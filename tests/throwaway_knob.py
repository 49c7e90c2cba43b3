"""A throw-away knob added to the knob table alone, before anything reads it; then every stage that reads the table.

Run by tests/test_knob_table.py in a process of its own: `python tests/throwaway_knob.py CONFIG_JSON FOLDER`. The
knob is `preemption_mode`, which running request the engine preempts when its KV cache is full (last or first in):
a real `MockEngineArgs` argument that the table does not hold, so Dynamo's own mocker judges its values for each
backend. Its flags are made up (`--throwaway-preemption-mode`): no engine is claimed to have them, what is tested is
that one entry reaches every stage. The script loads spica_lib/config/knobs.py by its path and adds the entry, so
that the package's imports find the extended table; then it prints, as JSON, what the search space, the replay's
arguments, both engines' deployment files, `describe` and the schema reference made of it.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# The package of this checkout, as the table loaded below is: run as a script, Python would otherwise find the
# installed one first (an editable install points at the checkout it was made from, not another worktree's).
sys.path.insert(0, str(REPO))

spec = importlib.util.spec_from_file_location("spica_lib.config.knobs", REPO / "spica_lib" / "config" / "knobs.py")
knobs = importlib.util.module_from_spec(spec)
sys.modules["spica_lib.config.knobs"] = knobs
spec.loader.exec_module(knobs)
knobs.KNOBS["preemption_mode"] = knobs.Knob(
    "preemption_mode", "choice", "which running request the engine preempts when its KV cache is full",
    default=dict.fromkeys(knobs.ALL_ROLES, ("lifo",)), roles=knobs.ALL_ROLES, choices=("lifo", "fifo"),
    replay="preemption_mode", label="preempt {}",
    spellings={"vllm": knobs.Flag("--throwaway-preemption-mode"), "sglang": knobs.Flag("--throwaway-preemption")},
)  # fmt: skip

# Only now the stages that read the table (the package builds its config model on import).
import yaml  # noqa: E402

from spica_lib.config import SmartSearchConfig  # noqa: E402
from spica_lib.config.reference import config_reference  # noqa: E402
from spica_lib.deploy.dgd import components_by_role, main_container  # noqa: E402
from spica_lib.deploy.settings import deployed_engine  # noqa: E402
from spica_lib.deploy.top import write_deployment  # noqa: E402
from spica_lib.facts.catalog import resolve_backend_version  # noqa: E402
from spica_lib.facts.parallel import ParallelShape, ReplicaConfig  # noqa: E402
from spica_lib.pools.knobs import branch_knob_choices  # noqa: E402
from spica_lib.trial.describe import describe  # noqa: E402
from spica_lib.trial.evaluate import prepare_trial  # noqa: E402
from spica_lib.trial.spec import TrialRecord, TrialResult  # noqa: E402


def main(config_json: str, folder: str) -> dict:
    config = SmartSearchConfig.from_mapping(json.loads(config_json))
    space = config.search_space
    choices = branch_knob_choices(space, "agg")
    field = type(space).model_fields["prefill_preemption_mode"]
    seen: dict = {"field_default": field.get_default(call_default_factory=True), "choices": choices["agg_preemption_mode"],
                  "replay": {}, "files": {}, "describe": {}}  # fmt: skip
    for backend in ("vllm", "sglang"):
        selection = {name: values[0] for name, values in choices.items()}
        selection.update(deployment_mode="agg", backend=backend, agg_preemption_mode="fifo")
        layout = ReplicaConfig(shape=ParallelShape(tp=2), replicas=2)
        trial = prepare_trial(config, selection, layout, backend_version=resolve_backend_version("h200_sxm", backend))
        record = TrialRecord(key=trial.key(), spec=trial, result=TrialResult(status="feasible", score=1.0, used_gpus=4))
        seen["replay"][backend] = trial.replay.plan.agg_engine_args["preemption_mode"]
        seen["describe"][backend] = describe(trial)
        files = write_deployment(Path(folder) / backend, 1, record, config, run="c0ffee123456")
        dgd = (Path(folder) / backend / "k8s_deploy.yaml").read_text()
        worker = components_by_role(next(yaml.safe_load_all(dgd)))["agg"]
        main_words = main_container(worker)
        seen["files"][backend] = {
            "read_back": deployed_engine(backend, worker)["preemption_mode"],
            "command": " ".join([*main_words.get("command", []), *main_words.get("args", [])]),
            "differences": files.differences,
            "error": files.error,
        }
    reference = config_reference()
    seen["reference"] = [line for line in reference.splitlines() if "preemption_mode" in line]
    return seen


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], sys.argv[2])))
