"""What `spica run` shows: the progress view (one block in a terminal, a line per event elsewhere), Snakemake's
own log in the run folder (on the screen with -v), and the run's answer last — on real sweeps.

The SLURM profile's view is checked in tests/test_slurm.py (the sweep that runs its trials there), a killed
replay job's error and log path in tests/test_search_workflow.py, a second run's answer in tests/test_report.py.
"""

import os
import pty
import re
import subprocess
import threading

import pytest
import yaml
from conftest import REPO, SPICA_RUN, search_only, snakemake_log, write_yaml

from spica_lib.config.narrow import narrowed
from spica_lib.run.answer import answer_block
from spica_lib.run.progress_view import ERASE_BLOCK

pytestmark = pytest.mark.slow

# What Snakemake's own text looks like: a job header, its timestamp, its scheduling words.
SNAKEMAKE_TEXT = re.compile(r"^(\[\w{3} \w{3} |Job \d+|rule |localrule |Finished jobid|Select jobs|Execute \d+ jobs)", re.M)
MOST_LINES = 40


def test_a_sweep_prints_its_progress_then_its_answer_in_few_lines_and_snakemakes_log_goes_to_the_run(
    default_run, monkeypatch
):
    run, done = default_run  # config/default.yaml as `make run` runs it, its output a pipe
    lines = done.stdout.splitlines()
    assert len(lines) <= MOST_LINES, done.stdout
    assert not SNAKEMAKE_TEXT.search(done.stdout + done.stderr), done.stdout + done.stderr
    assert lines[0] == f"spica run {run.name}: Snakemake's log is results/{run.name}/logs/snakemake.log"
    # Each line of the view says when (the elapsed time), and the stages after the search each say they ended.
    view = lines[1 : lines.index("")]
    assert view and all(re.match(r"\[ *\d+ (s|min)\] ", line) for line in view), view
    for stage in ("finish", "stress test", "baselines", "report", "deployment files"):
        assert any(re.search(rf"\] {stage} +done", line) for line in view), (stage, view)
    assert any("search: about" in line and "left at this run's pace" in line for line in view)
    # The answer last: summary.json's line, then where the report and the first deployment's files are.
    monkeypatch.chdir(run.parents[1])
    answer = answer_block(f"results/{run.name}")
    assert answer and done.stdout.rstrip().endswith(answer)
    assert answer.splitlines()[-2:] == [
        f"report: results/{run.name}/report/report.md",
        f"deployment files of #1: results/{run.name}/deploy/1/ (Kubernetes and SLURM; `spica rehearse "
        f"results/{run.name}` tries it first)",
    ]
    log = snakemake_log(run)  # Snakemake's text and its jobs' output went there, and the view never failed in it
    assert SNAKEMAKE_TEXT.search(log) and "spica done:" in log and "Logging error" not in log


def small_sweep() -> dict:
    data = yaml.safe_load((REPO / "config" / "default.yaml").read_text())
    data["search_space"] = narrowed(data["search_space"], deployment_mode=["agg"], router_mode=["round_robin"])
    data["sweep"].update(max_rounds=1, candidates_per_round=2)
    return search_only(data)


def in_a_terminal(command: list[str], cwd, columns: int = 100) -> tuple[int, str]:
    """Run `command` with a pseudo-terminal as its stdin, stdout and stderr; its exit code and all it wrote."""
    leader, follower = pty.openpty()
    os.set_blocking(leader, True)
    import fcntl
    import struct
    import termios

    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 40, columns, 0, 0))
    process = subprocess.Popen(command, cwd=cwd, stdin=follower, stdout=follower, stderr=follower, close_fds=True)
    os.close(follower)
    chunks: list[bytes] = []

    def read() -> None:  # the terminal's buffer is small: read it while the sweep writes
        while True:
            try:
                chunk = os.read(leader, 4096)
            except OSError:  # EIO: every holder of the terminal's other end has closed it
                return
            if not chunk:
                return
            chunks.append(chunk)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    code = process.wait(timeout=900)
    reader.join(timeout=30)
    os.close(leader)
    return code, b"".join(chunks).decode("utf-8", errors="replace").replace("\r\n", "\n")


def test_in_a_terminal_the_view_is_one_block_drawn_again_in_place_then_the_answer(tmp_path):
    path = write_yaml(tmp_path, small_sweep())
    code, screen = in_a_terminal([*SPICA_RUN, str(path)], tmp_path)
    assert code == 0, screen[-3000:]
    assert not SNAKEMAKE_TEXT.search(screen), screen[-3000:]
    erase = re.compile(re.escape(ERASE_BLOCK).replace(r"\{lines\}", r"\d+"))
    drawn = erase.split(screen)
    assert len(drawn) > 3, screen[-3000:]  # drawn again as the sweep went on (once a second, and on each job event)
    # The block is as tall as its last drawing: each redraw went up by exactly the lines it had drawn.
    heights = [len(block.splitlines()) for block in drawn[1:-1]]
    ups = [int(n) for n in re.findall(r"\x1b\[(\d+)F", screen)]
    assert ups[1:] == heights[: len(ups) - 1]
    last = drawn[-1]  # what stays on the screen: the block's last state, then the answer
    assert re.search(r"^spica · \d+ s elapsed", last, re.M)
    assert "  agg     round 1/1 · trials 2 of ~2" in last and "best so far" in last
    assert last.rstrip().splitlines()[-1].startswith("deployment files of #1: results/")
    assert "spica done:" in last and all(len(line) < 100 for line in last.split("\n\n")[0].splitlines())


def test_verbose_shows_snakemakes_log_on_the_screen_and_still_ends_with_the_answer(default_run):
    run, done = default_run
    again = subprocess.run([*SPICA_RUN, str(run.parents[1] / "spica.yaml"), "-v"], cwd=run.parents[1],
                           capture_output=True, text=True, check=False, timeout=300)  # fmt: skip
    assert again.returncode == 0, again.stderr[-2000:]
    assert "Nothing to be done" in again.stdout and "Nothing to be done" in snakemake_log(run)
    assert again.stdout.endswith(done.stdout[done.stdout.index("spica done:") :])
    refused = subprocess.run([*SPICA_RUN, "-v", "-n"], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2 and "dry run" in refused.stderr  # -v would do nothing there: refused


def test_a_fleet_shows_its_stages_not_snakemakes_records_and_a_failure_shows_its_logs_last_lines(tmp_path, capsys):
    from spica_lib.fleet.launch import FLEET_VOICE
    from spica_lib.run.run_screen import run_on_screen

    fleet = tmp_path / "results" / "f"

    def fake_snakemake(command, cwd, output, pass_fds):  # a fake (named so): Snakemake's records of a failing fleet
        (fleet / "fleet_config.json").write_text("{}")  # its first job's output: the fleet folder stays
        output.write(
            "[Mon Dec  7 10:04:57 2026]\nJob 3: Sweeping model a (its own Snakemake; its log: results/f/models/a/x)\n"
            "Reason: Missing output files: results/f/models/a.done.json\nFinished jobid: 3 (Rule: model_sweep)\n"
            "Job 1: Splitting the inventory between the models; confirming the plan by replays\n"
            "Error in rule fleet_plan:\n    jobid: 1\n"
        )
        output.flush()
        return 1

    code = run_on_screen(["python", "-m", "snakemake"], fleet, False, fake_snakemake, voice=FLEET_VOICE)
    said = capsys.readouterr()
    assert code == 1
    stages = [line.split("] ", 1)[1] for line in said.out.splitlines() if line.startswith("[")]
    assert stages == ["Sweeping model a (its own Snakemake; its log: results/f/models/a/x)",
                      "Splitting the inventory between the models; confirming the plan by replays"]  # fmt: skip
    assert not SNAKEMAKE_TEXT.search(said.out) and "Reason:" not in said.out
    assert "spica fleet failed (Snakemake exit 1)" in said.err and "Error in rule fleet_plan:" in said.err
    log = fleet / "logs" / "snakemake.log"
    assert f"the whole log: {log}" in said.err and log.read_text().startswith("=== spica fleet f, started")
