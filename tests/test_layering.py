"""The tree shows the pipeline: each stage package imports only the packages below it.

base <- facts | traces <- config <- pools | predictor | replay <- trial <- search | baselines <- results | fidelity <- run
<- deploy <- rehearsal <- report <- fleet <- host <- pilot <- api <- cli. Packages that share a layer do not import each other. Imports inside functions
count too: a lazy import is still a dependency. Inside a package the modules import each other without a cycle.
"""

import ast
from pathlib import Path

import spica_lib

LAYERS = [
    ("base",),
    ("facts", "traces"),
    ("config",),
    ("pools", "predictor", "replay"),
    ("trial",),
    ("search", "baselines"),
    ("results", "fidelity"),
]
LAYERS += [("run",), ("deploy",), ("rehearsal",), ("report",), ("fleet",), ("host",), ("pilot",), ("api",), ("cli",)]
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


def module_names(package_dir: Path) -> dict[str, Path]:
    """Every module of a package, sub-packages included, by its dotted name inside it (`view`, `jobs.finish`,
    `jobs.__init__`, `__init__`)."""
    return {".".join(path.relative_to(package_dir).with_suffix("").parts): path for path in sorted(package_dir.rglob("*.py"))}


def sibling_imports(package: str, modules: set[str], source: str, module: str = "") -> set[str]:
    """The modules of `package` (dotted names inside it, as `module_names` gives them) that its module `module`
    imports.

    `from spica_lib.pkg.sub import name` reaches the module `sub.name` where there is one, else the package
    `sub`'s `__init__`; a relative import is read against the package `module` is in."""
    found = set()
    here = module.split(".")[:-1]  # the sub-package `module` is in (its own, for an __init__)

    def reach(dotted: list[str], names: list[str]) -> None:
        if dotted[:2] != ["spica_lib", package]:
            return
        inner = dotted[2:]
        for name in names or [None]:
            candidates = [".".join([*inner, name])] if name else []
            candidates += [".".join(inner), ".".join([*inner, "__init__"])] if inner else ["__init__"]
            found.update(next(([c] for c in candidates if c in modules), []))

    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Import | ast.ImportFrom):
            continue
        names = [alias.name for alias in node.names]
        if isinstance(node, ast.ImportFrom) and node.level:
            base = ["spica_lib", package, *here][: 2 + len(here) - (node.level - 1)]
            reach([*base, *filter(None, (node.module or "").split("."))], names)
        elif isinstance(node, ast.ImportFrom) and node.module == "spica_lib":
            if package in names:
                reach(["spica_lib", package], [])
        elif isinstance(node, ast.ImportFrom) and node.module:
            reach(node.module.split("."), names)
        elif isinstance(node, ast.Import):
            for name in names:
                reach(name.split("."), [])
    return found


def module_graph(package_dir: Path) -> dict[str, set[str]]:
    """Module -> the modules of the same package (sub-packages included) it imports, lazy imports too."""
    paths = module_names(package_dir)
    return {
        name: sibling_imports(package_dir.name, set(paths), path.read_text(encoding="utf-8"), name) - {name}
        for name, path in paths.items()
    }


def import_cycle(graph: dict[str, set[str]]) -> list[str]:
    """One cycle of the graph as a path that ends where it starts ([] when there is none)."""
    done: set[str] = set()

    def visit(node: str, path: list[str]) -> list[str]:
        if node in path:
            return path[path.index(node) :] + [node]
        if node in done:
            return []
        for target in sorted(graph.get(node, ())):
            if cycle := visit(target, [*path, node]):
                return cycle
        done.add(node)
        return []

    for start in sorted(graph):
        if cycle := visit(start, []):
            return cycle
    return []


def test_no_two_modules_of_a_package_import_each_other_even_through_others():
    # A module that imports a sibling which imports it back (lazily, to dodge the import error) is one idea
    # split in two files: the shared piece belongs in one of them, or in a module of its own below both.
    cycles = {package: import_cycle(module_graph(LIB / package)) for package in sorted(RANK)}
    found = [f"spica_lib/{package}: {' -> '.join(cycle)}" for package, cycle in cycles.items() if cycle]
    assert found == [], "import cycles inside a package: " + "; ".join(found)


def test_the_cycle_check_sees_lazy_relative_and_package_imports():
    siblings = {"plan", "scoring", "table", "__init__"}
    lazy = "def f():\n    from spica_lib.predictor.scoring import warmup_windows\n"
    assert sibling_imports("predictor", siblings, lazy) == {"scoring"}
    named = "from spica_lib.predictor import plan, SomeName\nimport spica_lib.predictor.table\n"
    assert sibling_imports("predictor", siblings, named) == {"plan", "table", "__init__"}
    assert sibling_imports("predictor", siblings, "import spica_lib.predictor\n") == {"__init__"}
    relative = "from . import table\nfrom .plan import PredictorJob\nfrom spica_lib.config.presets import x\n"
    assert sibling_imports("predictor", siblings, relative, "scoring") == {"table", "plan"}
    assert sibling_imports("predictor", siblings, "from spica_lib import predictor\n") == {"__init__"}
    assert import_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert import_cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) == []


def test_the_cycle_check_walks_sub_packages_and_finds_a_circle_planted_there(tmp_path):
    run = tmp_path / "run"
    (run / "jobs").mkdir(parents=True)
    for name in ("__init__.py", "layout.py", "jobs/__init__.py", "jobs/ranked.py"):
        (run / name).write_text('"""A module."""\n')
    (run / "jobs" / "finish.py").write_text("from spica_lib.run.jobs.merge import merged\n")
    (run / "jobs" / "merge.py").write_text("def f():\n    from .finish import finish\n")  # lazily, back
    assert import_cycle(module_graph(run)) in (["jobs.finish", "jobs.merge", "jobs.finish"],
                                               ["jobs.merge", "jobs.finish", "jobs.merge"])  # fmt: skip
    (run / "jobs" / "merge.py").write_text("from spica_lib.run.jobs import ranked\nfrom ..layout import RunFiles\n")
    assert import_cycle(module_graph(run)) == [] and module_graph(run)["jobs.merge"] == {"jobs.ranked", "layout"}
    (run / "layout.py").write_text("from spica_lib.run.jobs.finish import x\n")  # run/ and run/jobs/ in a circle
    assert import_cycle(module_graph(run)) == ["jobs.finish", "jobs.merge", "layout", "jobs.finish"]
