"""`python -m spica_lib.rehearsal.folder_keeper FOLDER [JOB]`: when signalled, cancels SLURM job JOB (if given),
removes FOLDER, and exits.

A rehearsal starts it with the kernel's promise of SIGTERM at the rehearsal's death (rehearsal/processes.py,
rehearsal/on_slurm.py), so that neither the folder its processes shared nor the job it submitted outlives
it, even when the rehearsal itself is killed outright.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys


def main(folder: str, job: str | None = None) -> None:
    def clean(signum: int, frame: object) -> None:
        if job:
            subprocess.run(["scancel", job], check=False, capture_output=True, timeout=60)
        if folder:
            shutil.rmtree(folder, ignore_errors=True)
        sys.exit(0)

    signal.signal(signal.SIGTERM, clean)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's ^C reaches the whole group: the rehearsal answers it
    while True:
        signal.pause()


if __name__ == "__main__":
    main(*sys.argv[1:3])
