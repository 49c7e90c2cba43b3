"""The tree shows the pipeline: each stage package imports only the packages below it.

base <- facts <- config <- pools | predictor | replay <- trial <- search | baselines <- results | fidelity <- run
<- report <- fleet <- host <- pilot <- api <- cli. Packages that share a layer do not import each other. Imports inside functions
count too: a lazy import is still a dependency.
"""

import ast
from pathlib import Path

import spica_lib

LAYERS = [
    ("base",),
    ("facts",),
    ("config",),
    ("pools", "predictor", "replay"),
    ("trial",),
    ("search", "baselines"),
    ("results", "fidelity"),
]
LAYERS += [("run",), ("report",), ("fleet",), ("host",), ("pilot",), ("api",), ("cli",)]
RANK = {package: rank for rank, layer in enumerate(LAYERS) for package in layer}
LIB = Path(spica_lib.__file__).parent


def imported_packages(source: str) -> set[str]:
    """The spica_lib subpackages a module's source imports."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            parts = node.module.split(".")
            if parts[0] != "spica_lib":
                continue
            found.update(parts[1:2] or [alias.name for alias in node.names])
        elif isinstance(node, ast.Import):
            found.update(a.name.split(".")[1] for a in node.names if a.name.startswith("spica_lib."))
    return found


def upward_imports(package: str, source: str) -> list[str]:
    """Imports of a module of `package` that reach a package not below it."""
    return sorted(other for other in imported_packages(source) if other != package and RANK[other] >= RANK[package])


def modules():
    for path in sorted(LIB.rglob("*.py")):
        relative = path.relative_to(LIB)
        if len(relative.parts) > 1:
            yield relative.parts[0], path


def test_every_package_has_a_layer_and_says_what_it_holds():
    packages = {p.name for p in LIB.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert packages == set(RANK), "place a new package in LAYERS"
    for package in packages:
        doc = ast.get_docstring(ast.parse((LIB / package / "__init__.py").read_text()))
        assert doc and doc.count(".") >= 1, f"spica_lib/{package}/__init__.py needs a one-sentence docstring"


def test_no_module_imports_a_package_at_or_above_its_own_layer():
    problems = {
        str(path.relative_to(LIB)): found
        for package, path in modules()
        if (found := upward_imports(package, path.read_text(encoding="utf-8")))
    }
    assert problems == {}


def test_the_check_sees_lazy_and_sibling_imports():
    lazy = "def f():\n    from spica_lib.search.rounds import suggest_round\n"
    assert upward_imports("trial", lazy) == ["search"]
    assert upward_imports("pools", "from spica_lib.replay.plan import DeploymentPlan\n") == ["replay"]
    assert upward_imports("search", "from spica_lib import trial\nimport spica_lib.config.fields\n") == []
