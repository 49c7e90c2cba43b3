"""`python -m spica_lib.deploy.folder_keeper FOLDER`: removes FOLDER when signalled, then exits.

A rehearsal starts it with the kernel's promise of SIGTERM at the rehearsal's death (deploy/live_processes.py),
so that the folder its processes shared is gone even when the rehearsal itself is killed outright.
"""

from __future__ import annotations

import shutil
import signal
import sys


def main(folder: str) -> None:
    def remove(signum: int, frame: object) -> None:
        shutil.rmtree(folder, ignore_errors=True)
        sys.exit(0)

    signal.signal(signal.SIGTERM, remove)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's ^C reaches the whole group: the rehearsal answers it
    while True:
        signal.pause()


if __name__ == "__main__":
    main(sys.argv[1])
