"""The knob table (spica_lib/config/knobs.py) is the one declaration of a searched setting.

docs/architecture.md's "How to add a knob" lists the modules the table feeds: exactly those import it. A throw-away
knob added to the table alone, in a process of its own (tests/throwaway_knob.py), is found in the search space, the
replay's arguments, vLLM's and SGLang's deployment files, `describe` and the schema reference. Each entry of the
table is one Dynamo's own parts take: its replay argument and default by `MockEngineArgs` / `KvRouterConfig`.
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys

import pytest
from conftest import REPO, config_data

import spica_lib
from spica_lib.config.knob_values import replay_refusal
from spica_lib.config.knobs import KNOBS
from spica_lib.config.reference import config_reference

pytestmark = pytest.mark.slow

LIB = REPO / "spica_lib"
TABLE = "spica_lib.config.knobs"


def section(title: str) -> str:
    text = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
    return text.split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]


def imports_table(source: str) -> bool:
    """Whether a module's source imports the knob table (a lazy import counts)."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module == TABLE:
            return True
        if isinstance(node, ast.ImportFrom) and node.module == "spica_lib.config" and "knobs" in {a.name for a in node.names}:
            return True
        if isinstance(node, ast.Import) and any(alias.name == TABLE for alias in node.names):
            return True
    return False


def test_the_table_feeds_exactly_the_modules_architecture_md_lists():
    listed = set(re.findall(r"`(spica_lib/[\w/]+\.py)`", section("How to add a knob")))
    listed.discard("spica_lib/config/knobs.py")  # the table itself
    listed -= {"spica_lib/facts/parallel.py", "spica_lib/config/presets.py"}  # named as what is not a knob
    importing = {
        str(path.relative_to(REPO)) for path in sorted(LIB.rglob("*.py")) if imports_table(path.read_text("utf-8"))
    }
    assert importing == listed
    assert imports_table("def f():\n    from spica_lib.config.knobs import KNOBS\n")  # the check sees a lazy import
    assert not imports_table("from spica_lib.config.fields import ROLES\n")


def test_a_throw_away_knob_added_to_the_table_alone_reaches_every_stage(tmp_path):
    data = config_data(search_space={"backend": ["vllm", "sglang"], "deployment_mode": ["agg"], "gpu_budget": 8,
                                     "router_mode": ["round_robin"], "planner_scaling_policy": ["disabled"],
                                     "agg_preemption_mode": ["lifo", "fifo"]})  # fmt: skip
    done = subprocess.run([sys.executable, str(REPO / "tests" / "throwaway_knob.py"), json.dumps(data), str(tmp_path)],
                          capture_output=True, text=True, timeout=600, cwd=REPO)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["field_default"] == ["lifo"] and seen["choices"] == ["lifo", "fifo"]  # the config model, the branch
    assert seen["replay"] == {"vllm": "fifo", "sglang": "fifo"}  # MockEngineArgs' own argument
    for backend, flag in (("vllm", "--throwaway-preemption-mode fifo"), ("sglang", "--throwaway-preemption fifo")):
        files = seen["files"][backend]
        assert files["error"] is None and files["differences"] == [] and files["read_back"] == "fifo"
        assert flag in files["command"], files["command"]
    assert all("preempt fifo" in line for line in seen["describe"].values())
    assert any(line.startswith("| `agg_preemption_mode` | list of one of `lifo`, `fifo`") for line in seen["reference"])
    row = next(line for line in seen["reference"] if line.startswith("| `preemption_mode` |"))
    assert "MockEngineArgs `preemption_mode`" in row and "`--throwaway-preemption`" in row
    # Without the entry none of it exists: what the process found came from the one entry.
    assert "preemption_mode" not in KNOBS and "preemption_mode" not in config_reference()


@pytest.mark.parametrize("name", list(KNOBS))
def test_each_entry_is_one_dynamos_own_parts_take(name):
    knob = KNOBS[name]
    for role, _ in knob.role_fields():
        default = knob.role_default(role)
        values = [*(default if knob.searched else [default]), *([knob.maximum] if knob.maximum is not None else [])]
        for value in values:  # the inert value is never handed to the replay: it is left out
            assert value == knob.inert or replay_refusal(knob, value) is None, (role, value)
    if knob.reaches == "engine":
        assert knob.roles and set(knob.spellings) == {"vllm", "sglang", "trtllm"}  # every engine can say it
    assert knob.reaches != "plan" or (knob.kind == "choice" and knob.replay is None)
    assert knob.label == "" or knob.label.format(1)
