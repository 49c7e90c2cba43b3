"""The `spica` command: validate, pools, evaluate, run and schema."""

from spica_lib.cli.main import main

__all__ = ["main"]
