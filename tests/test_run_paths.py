"""A run folder's paths are spelled once, in RunFiles (spica_lib/run/layout.py; a fleet's in fleet/layout.py).

Every other module asks RunFiles; one that joins a run folder's own names by hand (`run_dir / "logs"`,
f"{run}/deploy/{rank}") is found here, in the library and in the workflow.
"""

import ast
import re
from pathlib import Path

import spica_lib

REPO = Path(spica_lib.__file__).parents[1]
LAYOUTS = {"spica_lib/run/layout.py", "spica_lib/fleet/layout.py"}
# What a run folder holds at its top: a module that joins one of these to a folder spells a run path by hand.
# (config.json is left out: a model's folder has one too, which is not a run's.)
RUN_NAMES = {
    "logs", "rounds", "branches", "deploy", "report", ".pilot", ".trace-scans", ".trace-resamples",
    "sweep_process.json", "summary.json", "finish.json", "policies.json", "candidates.parquet",
    "ranked.csv", "pareto.csv", "manifest.json", "stress.json", "capacity.json", "baselines.json",
    "load_predictor.json", "load_predictor.parquet",
}  # fmt: skip


def hand_made_paths(source: str) -> list[str]:
    """`folder / "<run name>"`, `os.path.join(folder, "<run name>")` and f"{folder}/<run name>" in a module."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            right = node.right
            if isinstance(right, ast.Constant) and isinstance(right.value, str) and right.value.split("/")[0] in RUN_NAMES:
                found.append(ast.unparse(node))
        elif isinstance(node, ast.Call) and ast.unparse(node.func) == "os.path.join":
            words = [a.value for a in node.args[1:] if isinstance(a, ast.Constant) and isinstance(a.value, str)]
            if any(w.split("/")[0] in RUN_NAMES for w in words):
                found.append(ast.unparse(node))
        elif isinstance(node, ast.JoinedStr):
            for before, after in zip(node.values, node.values[1:]):
                if isinstance(before, ast.FormattedValue) and isinstance(after, ast.Constant):
                    match = re.match(r"/([^/{]+)", str(after.value))
                    if match and match.group(1) in RUN_NAMES:
                        found.append(ast.unparse(node))
    return found


def sources():
    for path in sorted([*(REPO / "spica_lib").rglob("*.py"), *(REPO / "snakemake_logger_plugin_spica").rglob("*.py")]):
        yield str(path.relative_to(REPO)), path.read_text(encoding="utf-8")
    for path in sorted([REPO / "workflow" / "Snakefile", *(REPO / "workflow").rglob("*.smk")]):
        # The workflow's Python: its rule bodies and helpers, as text (Snakemake's syntax is not Python's).
        yield str(path.relative_to(REPO)), path.read_text(encoding="utf-8")


def test_no_run_folder_path_is_spelled_outside_runfiles():
    found = {}
    for name, source in sources():
        if name in LAYOUTS:
            continue
        if name.endswith(".py"):
            hits = hand_made_paths(source)
        else:
            hits = [m.group(0) for m in re.finditer(r"""(?:/\s*|join\([^)]*,\s*)["'](?:%s)["']""" % "|".join(map(re.escape, RUN_NAMES)), source)]
        if hits:
            found[name] = hits
    assert found == {}


def test_the_check_sees_each_way_of_spelling_a_run_path():
    assert hand_made_paths('Path(run_dir) / "logs" / "pilots"\n') == ["Path(run_dir) / 'logs'"]
    assert hand_made_paths('os.path.join(RUN.dir, ".trace-scans")\n') == ["os.path.join(RUN.dir, '.trace-scans')"]
    assert hand_made_paths('f"{run}/deploy/{rank}"\n') == ["f'{run}/deploy/{rank}'"]
    assert hand_made_paths('Path(deploy) / "rehearsal.md"\nfiles.deployment(1)\n') == []
