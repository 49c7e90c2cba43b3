"""`spica rehearse RUN [--rank N] [--where local|slurm]`: a ranked deployment started for real with mocker workers."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def add_rehearse_parser(commands: argparse._SubParsersAction) -> None:
    from spica_lib.rehearsal.traffic import DEFAULT_REQUESTS

    rehearse = commands.add_parser(
        "rehearse",
        help="start a ranked deployment with Dynamo's frontend, router and mocker workers, send it a sample of "
        "its traffic and compare with the replay (deploy/<rank>/rehearsal.json)",
    )
    rehearse.add_argument("run", help="a run folder (results/<run>) or a run name")
    rehearse.add_argument("--rank", type=int, default=1, help="which ranked deployment (default 1)")
    rehearse.add_argument("--where", choices=("local", "slurm"), default="local",
                          help="this machine (default), or through its sbatch script on the SLURM cluster")  # fmt: skip
    rehearse.add_argument("--requests", type=int, default=DEFAULT_REQUESTS,
                          help=f"the traffic sample's size (default {DEFAULT_REQUESTS})")  # fmt: skip
    rehearse.add_argument("--speedup", type=float, default=1.0,
                          help="run the mocker's steps and the arrivals this much faster (default 1: real time)")  # fmt: skip
    rehearse.add_argument("--partition", help="--where slurm: the partition to submit to (default: the cluster's)")


def rehearse_command(args: argparse.Namespace) -> int:
    from spica_lib.cli.runs import locate_run
    from spica_lib.rehearsal.processes import RehearsalFailed
    from spica_lib.rehearsal.rehearse import rehearse
    from spica_lib.run.layout import RunFiles

    if args.requests < 1 or args.speedup <= 0 or args.rank < 1:
        print("--requests and --rank are at least 1, --speedup above 0", file=sys.stderr)
        return EXIT_USAGE
    if args.partition and args.where != "slurm":
        print("--partition is where a SLURM rehearsal is submitted: add --where slurm", file=sys.stderr)
        return EXIT_USAGE
    folder = locate_run(args.run)
    if folder is None:
        print(f"no run at {args.run!r}: give a run folder holding config.json", file=sys.stderr)
        return EXIT_USAGE
    deploy = Path(RunFiles(dir=str(folder)).deploy_dir)
    try:
        found = rehearse(deploy, args.rank, args.where, args.requests, args.speedup, args.partition)
    except RehearsalFailed as failed:
        print(f"rehearsal of rank {args.rank} failed: {failed}", file=sys.stderr)
        return EXIT_FAILED
    print((Path(RunFiles(dir=str(folder)).deployment(args.rank)) / "rehearsal.md").read_text(encoding="utf-8"))
    served = all(run is not None and run.completed == run.requests for run in (found.live, found.closed_live))
    # "too loaded to judge latency" is no verdict on the deployment: the machine is said to be the cause, exit 0.
    return EXIT_OK if found.error is None and served and found.verdict != "differs" else EXIT_FAILED
