"""Writes the README's example results from a real run of the default sweep, so they cannot drift from it.

Runs `config/default.yaml` with `run_smart_search` in a fresh folder, then replaces the README block
between the `readme-example` markers with the run's own words: the top rows of report.md's "Top
deployments" table, a sentence for each row that ties an earlier one, and the answer `spica run` ends with
(summary.json -> line, then where the report and deploy/1/ are; run/answer.py), its run folder written
`results/<run>`. It copies the run's report/tradeoff.png to docs/images/default_tradeoff.png.
`tests/test_readme.py` builds the same block from the test suite's run of config/default.yaml at the same
commit and compares it whole: a changed answer fails there until this script is run again.

Run: .venv/bin/python bench/readme_example.py [--rows 4] [--keep DIR]
"""

from __future__ import annotations

import argparse
import re
import shutil
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from spica_lib.api import run_smart_search  # noqa: E402
from spica_lib.run.answer import answer_block  # noqa: E402

README = REPO / "README.md"
IMAGE = REPO / "docs" / "images" / "default_tradeoff.png"
BEGIN = "<!-- readme-example: begin (written by bench/readme_example.py from a run of config/default.yaml) -->"
END = "<!-- readme-example: end -->"
TABLE_HEADING = "## Top deployments"
TIE = re.compile(r"\(= #(\d+)\)")


def top_table(report: str, rows: int) -> list[str]:
    """The header, rule and first `rows` rows of report.md's "Top deployments" table."""
    section = report.split(TABLE_HEADING, 1)[1]
    table = [line for line in section.splitlines() if line.startswith("|")]
    return table[: 2 + rows]


def tie_sentences(table: list[str]) -> list[str]:
    sentences = []
    for line in table[2:]:
        rank = line.split("|")[1].strip()
        match = TIE.search(line)
        if match:
            sentences.append(
                f"Row {rank} replayed to exactly the metrics of row {match.group(1)}: "
                "the knobs that differ did not bind at this load."
            )
    return sentences


def run_answer(run_dir: Path) -> str:
    """The answer `spica run` ends with, its run folder written as the README writes it (`results/<run>`)."""
    answer = answer_block(run_dir)
    assert answer is not None, f"{run_dir} has no summary.json"
    return answer.replace(str(run_dir), "results/<run>")


def example_block(report: str, answer: str, rows: int) -> str:
    table = top_table(report, rows)
    parts = [
        BEGIN,
        "From the default sweep (`make run`; report.md's table, trimmed to its top rows):",
        "",
        *table,
        "",
    ]
    ties = tie_sentences(table)
    if ties:
        parts += [" ".join(ties), ""]
    parts += [
        "![score against GPUs for the default sweep](docs/images/default_tradeoff.png)",
        "",
        "The last lines it printed (`summary.json` → `line`, then where the report and the deployment files are):",
        "",
        "```",
        answer,
        "```",
        END,
    ]
    return "\n".join(parts)


def replace_block(readme: str, block: str) -> str:
    start, end = readme.index(BEGIN), readme.index(END) + len(END)
    return readme[:start] + block + readme[end:]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=4)
    parser.add_argument("--keep", help="run in this folder and keep it (default: a temporary folder)")
    args = parser.parse_args()
    folder = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="spica-readme-"))
    folder.mkdir(parents=True, exist_ok=True)
    try:
        outcome = run_smart_search(REPO / "config" / "default.yaml", workdir=folder)
        report = (outcome.run_dir / "report" / "report.md").read_text(encoding="utf-8")
        block = example_block(report, run_answer(outcome.run_dir), args.rows)
        README.write_text(replace_block(README.read_text(encoding="utf-8"), block), encoding="utf-8")
        shutil.copyfile(outcome.run_dir / "report" / "tradeoff.png", IMAGE)
        print(block)
    finally:
        if not args.keep:
            shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
