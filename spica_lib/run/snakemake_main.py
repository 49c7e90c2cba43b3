"""`python -m spica_lib.run.snakemake_main ARGS`: Snakemake's own command line, with Spica's progress view
registered as its logger plugin `spica` (snakemake_logger_plugin_spica), as `spica run` starts it.

Snakemake looks for logger plugins among the top-level packages on sys.path named `snakemake_logger_plugin_*`.
An editable install (`make venv`) serves Spica's packages through an import hook instead, which that search does
not see, so the plugin is registered here by its module: `--logger spica` then works however Spica was installed.
"""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> None:
    import snakemake_logger_plugin_spica as plugin
    from snakemake.cli import main as snakemake_main
    from snakemake_interface_logger_plugins.registry import LoggerPluginRegistry

    LoggerPluginRegistry().register_plugin(plugin.__name__, plugin)
    snakemake_main(sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    main()
