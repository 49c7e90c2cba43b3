"""The README's commands are run, dry-run or checked, as a doctest would, so a renamed command, option or file fails.

Every ```bash block of README.md is split into commands, each checked by what it is:

- `make TARGET [VAR=value]`: `make -n` of it (prints the recipe, runs nothing) must succeed;
- `spica SUB ...` (or `.venv/bin/spica`): SUB must be a subcommand and each option one `spica SUB --help` lists
  (with its value among the listed choices). Read-only subcommands then run for real, against the session's
  finished default run (`results/<run>` in the README is that run); `spica run` runs dry (`-n`) in a scratch
  folder; those that write into a run or start processes (`report`, `rehearse`, ...) are checked, not run;
- `snakemake ...`: a dry run (`-n`) of the workflow in a scratch folder;
- anything else (kubectl, sbatch) must be a command in EXTERNAL, and each path it names under `results/<run>` must
  exist in the finished run: the README may show a file a run does not write only if this test fails.

The ```python block runs with `run_smart_search` standing in for the sweep: its arguments are bound to the real
signature and it returns the finished run's outcome, so every attribute the block reads must exist. The README's
relative links and anchors are checked as `make docs` checks the guide's (the README is not part of the site).
"""

from __future__ import annotations

import inspect
import re
import shlex
import subprocess
import sys
import unicodedata
from functools import cache
from pathlib import Path

import pytest
from conftest import REPO

import spica_lib.api
from spica_lib.api.search import SearchOutcome, run_smart_search
from spica_lib.run.view import RunView

pytestmark = pytest.mark.slow

README = REPO / "README.md"
SPICA = [sys.executable, "-m", "spica_lib.cli"]
# Subcommands that only read (a config, or a finished run): run as written.
READ_ONLY = {"validate", "pools", "schema", "status", "show"}
# Subcommands that start a sweep: run dry.
DRY = {"run", "fleet"}
# Commands the README may show that cannot run here (a cluster's): checked by name and by the files they name.
EXTERNAL = {"kubectl", "sbatch"}
RUN_PLACEHOLDER = "results/<run>"


def blocks(language: str) -> list[str]:
    text = README.read_text(encoding="utf-8")
    return re.findall(rf"^```{language}\n(.*?)^```", text, flags=re.MULTILINE | re.DOTALL)


def bash_commands() -> list[str]:
    """Every command of the README's bash blocks: continuation lines joined, comments and blank lines dropped."""
    commands = []
    for block in blocks("bash"):
        for line in block.replace("\\\n", " ").splitlines():
            if shlex.split(line, comments=True):
                commands.append(line.strip())
    return commands


def test_the_readme_is_short_and_shows_every_kind_of_command():
    kinds = {_kind(shlex.split(c, comments=True)) for c in bash_commands()}
    assert {"make", "spica", "snakemake", "external"} <= kinds, kinds
    assert len(README.read_text(encoding="utf-8").splitlines()) <= 250, "the README is the front door: keep it short"


@pytest.mark.parametrize("command", bash_commands(), ids=lambda c: c.split("#")[0].strip())
def test_each_readme_command_runs_or_names_what_exists(command, default_run, tmp_path):
    run_dir = default_run[0]
    words = [_placeholder(word, run_dir) for word in shlex.split(command, comments=True)]
    kind = _kind(words)
    if kind == "make":
        rules = (REPO / "Makefile").read_text(encoding="utf-8")
        for target in [w for w in words[1:] if "=" not in w and not w.startswith("-")]:
            assert re.search(rf"^{re.escape(target)}:", rules, flags=re.MULTILINE), f"{command}: no target {target}"
        done = subprocess.run(
            ["make", "-n", *words[1:]], check=False, cwd=REPO, capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, f"{command}: {done.stderr}"
    elif kind == "spica":
        _check_spica(command, words[1:], tmp_path)
    elif kind == "snakemake":
        args = [_absolute(word) for word in words[1:]]
        args += [] if "-n" in args or "--dry-run" in args else ["-n"]
        snakefile = str(REPO / "workflow" / "Snakefile")
        done = subprocess.run([sys.executable, "-m", "snakemake", "--snakefile", snakefile, *args], cwd=tmp_path,
                              capture_output=True, check=False, text=True, timeout=120)  # fmt: skip
        assert done.returncode == 0, f"{command}: {done.stderr[-2000:]}"
    else:
        assert words[0] in EXTERNAL, f"{command}: {words[0]} is neither make, spica, snakemake nor in EXTERNAL"
        named = [Path(w) for w in words[1:] if w.startswith(str(run_dir))]
        assert named, f"{command}: names no file of the run"
        for path in named:
            assert path.exists(), f"{command}: a finished run has no {path.relative_to(run_dir)}"


def test_the_python_example_reads_a_finished_runs_outcome(default_run, monkeypatch):
    run_dir = default_run[0]
    calls = []

    def stand_in(config, **options):
        inspect.signature(run_smart_search).bind(config, **options)  # a renamed keyword fails here
        assert (REPO / config).is_file(), config
        calls.append(config)
        view = RunView(run_dir)
        return SearchOutcome(run_dir=run_dir, ranked=view.ranked, summary=view.summary)

    monkeypatch.setattr(spica_lib.api, "run_smart_search", stand_in)
    (example,) = blocks("python")
    exec(compile(example, "README.md", "exec"), {})  # noqa: S102 (the README's own example, as a doctest runs it)
    assert calls, "the example calls run_smart_search"


def test_the_readme_links_point_at_files_and_headings_that_exist():
    text = README.read_text(encoding="utf-8")
    links = re.findall(r"\]\(([^)\s]+)\)", text)
    assert links
    for link in links:
        if re.match(r"[a-z]+://", link):
            continue
        target, _, anchor = link.partition("#")
        path = README.parent / target if target else README
        assert path.exists(), f"README links to {link}: no such file"
        if anchor:
            assert anchor in _anchors(path), f"README links to {link}: no heading with that anchor"


def test_the_tour_quotes_the_example_run():
    """The tour explains the example block, which bench/readme_example.py rewrites from a new run: every score the
    prose quotes must be the block's, so a rewritten block with other numbers fails here until the prose follows."""
    text = README.read_text(encoding="utf-8")
    example = text[text.index("<!-- readme-example: begin") : text.index("<!-- readme-example: end -->")]
    tour = text[text.index("## A five-minute tour") : text.index("## Three ways to run")].replace(example, "")
    quoted = re.findall(r"(?<![\w.])\d+\.\d+(?![\w.])", tour)
    assert quoted
    for number in quoted:
        assert number in example, f"the tour quotes {number}, which the example run does not show"


def test_the_tour_block_is_what_a_run_of_this_commit_writes(default_run):
    """The example block (table, tie sentences, the answer's lines and counts) is rebuilt by bench/readme_example.py's
    own functions from the suite's run of config/default.yaml as shipped, and must be the README's, whole: a change
    in the answer, or one number edited by hand, fails here until `bench/readme_example.py` is run again."""
    sys.path.insert(0, str(REPO / "bench"))
    from readme_example import BEGIN, END, example_block, run_answer

    run_dir = default_run[0]
    text = README.read_text(encoding="utf-8")
    shown = text[text.index(BEGIN) : text.index(END) + len(END)]
    rows = sum(line.startswith("| ") and "·" in line for line in shown.splitlines())
    report = (run_dir / "report" / "report.md").read_text(encoding="utf-8")
    ran = example_block(report, run_answer(run_dir), rows)
    assert rows >= 1 and shown == ran, "the README's tour is not this commit's run: run bench/readme_example.py"


def _kind(words: list[str]) -> str:
    name = Path(words[0]).name
    if name in ("make", "spica", "snakemake"):
        return name
    return "external"


def _placeholder(word: str, run_dir: Path) -> str:
    return word.replace(RUN_PLACEHOLDER, str(run_dir)).replace("<run>", run_dir.name)


def _absolute(word: str) -> str:
    """A repository path (or `key=path`) as an absolute path, so that a command can run in a scratch folder."""
    key, equals, value = word.rpartition("=")
    if value and not value.startswith("-") and (REPO / value).exists():
        return f"{key}{equals}{REPO / value}"
    return word


def _check_spica(command: str, args: list[str], scratch: Path) -> None:
    sub, rest = args[0], args[1:]
    if ">" in rest:  # a redirection: the output is captured here anyway
        rest = rest[: rest.index(">")]
    usage = _help(sub)
    assert usage is not None, f"{command}: `spica {sub}` is not a subcommand"
    for i, word in enumerate(rest):
        if word.startswith("-"):
            assert re.search(rf"(^|[\s,\[]){re.escape(word)}([\s,=\]]|$)", usage, flags=re.MULTILINE), (
                f"{command}: {word}?"
            )
            choices = re.search(rf"{re.escape(word)} \{{([^}}]+)\}}", usage)
            if choices and i + 1 < len(rest):
                assert rest[i + 1] in choices.group(1).split(","), f"{command}: {word} {rest[i + 1]}?"
    if sub in READ_ONLY:
        done = subprocess.run([*SPICA, sub, *rest], cwd=REPO, capture_output=True, text=True, check=False, timeout=120)
    elif sub in DRY:
        rest = [_absolute(word) for word in rest]
        rest += [] if "-n" in rest or "--dry-run" in rest else ["-n"]
        done = subprocess.run(
            [*SPICA, sub, *rest], cwd=scratch, capture_output=True, text=True, check=False, timeout=120
        )
    else:  # it writes into the run or starts processes: its options were checked above, and its run must exist
        for word in rest:
            if "/results/" in word:
                assert Path(word).exists(), f"{command}: no {word}"
        return
    assert done.returncode == 0, f"{command}: exit {done.returncode}: {done.stderr[-2000:]}"


@cache
def _help(sub: str) -> str | None:
    done = subprocess.run([*SPICA, sub, "--help"], cwd=REPO, capture_output=True, text=True, check=False, timeout=60)
    return done.stdout if done.returncode == 0 else None


def _anchors(page: Path) -> set[str]:
    """The anchors of a Markdown page's headings, slugged as the docs site slugs them (Python-Markdown's toc)."""
    out = set()
    inside_code = False
    for line in page.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            inside_code = not inside_code
        elif not inside_code and line.startswith("#"):
            text = re.sub(r"[`*]", "", line.lstrip("#").strip())
            text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
            out.add(re.sub(r"[-\s]+", "-", re.sub(r"[^\w\s-]", "", text).strip().lower()))
    return out
