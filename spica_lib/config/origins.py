"""Problems named by the path the user wrote, where Spica read the input under other names.

A DynamoGraphDeploymentRequest (config/dgdr.py) and an upstream config's `adapters:` section
(config/adapters.py) are read onto Spica's own settings; each keeps a path table, `origins`: Spica path ->
the path in the user's file it came from. A problem the config's own checks find later, at a Spica path, is
named by the user's path it came from (the longest entry of the table that holds it), with the Spica path
beside it so that docs/config.md still explains the rule.
"""

from __future__ import annotations

from spica_lib.config.strict import ConfigError


def holds(outer: str, path: str) -> bool:
    """Whether `path` is `outer` or lies inside it (a key or an item of it)."""
    return path == outer or path.startswith((f"{outer}.", f"{outer}["))


def origin_of(path: str, origins: dict[str, str]) -> str | None:
    """The user's path a Spica path came from, or None when the table has no entry that holds it."""
    holders = [spica for spica in origins if holds(spica, path)]
    return origins[max(holders, key=len)] if holders else None


def relabel(error: ConfigError, origins: dict[str, str], subject: str, unmapped: str = "") -> ConfigError:
    """The error with each Spica path named by the user's path it came from; a path without an origin keeps its
    name, its message followed by `unmapped` (what it is a path of, when the user did not write it)."""
    problems = []
    for path, message in error.problems:
        origin = origin_of(path, origins)
        if origin is None:
            problems.append((path, f"{message}{unmapped}"))
        elif origin == path:
            problems.append((path, message))
        else:
            problems.append((f"{origin} (as {path})", message))
    return ConfigError(problems, source=error.source, subject=subject)
