"""The workflow's files hold rules: the Snakefile is a table of contents, Python beyond a short helper lives in a
library module, and what both workflows share is in workflow/rules/common.smk, included by each."""

import re

from conftest import REPO

WORKFLOW = REPO / "workflow"
FILES = [WORKFLOW / "Snakefile", WORKFLOW / "fleet.smk", *sorted((WORKFLOW / "rules").glob("*.smk"))]


def helper_lengths(text: str) -> dict[str, int]:
    """Each top-level `def` of a workflow file and its length in lines (up to the next top-level line)."""
    lines, found = text.splitlines(), {}
    for number, line in enumerate(lines):
        if match := re.match(r"def (\w+)\(", line):
            end = next((n for n in range(number + 1, len(lines)) if lines[n] and not lines[n][0].isspace()), len(lines))
            found[match.group(1)] = len([raw for raw in lines[number:end] if raw.strip()])
    return found


def test_no_workflow_file_holds_more_than_a_short_helper():
    long = {
        f"{path.relative_to(REPO)}:{name}": length
        for path in FILES
        for name, length in helper_lengths(path.read_text(encoding="utf-8")).items()
        if length > 15
    }
    assert long == {}


def test_both_workflows_include_the_shared_helpers_and_neither_redoes_them():
    for path in (WORKFLOW / "Snakefile", WORKFLOW / "fleet.smk"):
        text = path.read_text(encoding="utf-8")
        assert 'include: "rules/common.smk"' in text
        assert "JOBS[" not in text and "silence_when_orphaned()" not in text and "sys.exit(" not in text
