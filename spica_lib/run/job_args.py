"""A Snakemake job as plain data: what a rule script reads from its `snakemake` object.

The search's per-round jobs (suggest, replay, tell) run either in the rule script's own process or
in a child of the sweep's warm host (`spica_lib.host`); both get the job as this model, so the two
paths run the same code on the same values.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict


class Host(BaseModel):
    """Where this process runs its job, for the logs: set by the warm host in each job child it forks."""

    hosted: bool = False
    prepare_seconds: float = 0.0  # what the host spent loading for this job before it forked (a replay's warm-up)
    pilot: str = ""  # the SLURM job id of the pilot that runs it (spica_lib.pilot), when one does

    def where(self) -> str:
        if self.pilot:
            return f"in pilot job {self.pilot}"
        return "in the sweep's warm host" if self.hosted else "in its own process"


HOST = Host()


class JobArgs(BaseModel):
    """The named inputs, outputs and params of one job, its wildcards, log files, threads and resources."""

    model_config = ConfigDict(extra="forbid")

    rule: str
    input: dict[str, str | list[str]]
    output: dict[str, str | list[str]]
    params: dict[str, Any]
    wildcards: dict[str, str]
    log: list[str]
    threads: int
    resources: dict[str, Any]

    def inputs(self, name: str) -> list[str]:
        """A named input as a list of paths (a single path is a list of one)."""
        return _paths(self.input.get(name))

    def outputs(self, name: str) -> list[str]:
        """A named output as a list of paths (a single path is a list of one)."""
        return _paths(self.output.get(name))

    @classmethod
    def from_snakemake(cls, smk: Any) -> JobArgs:
        return cls(
            rule=smk.rule,
            input=_named(smk.input),
            output=_named(smk.output),
            params=_named(smk.params),
            wildcards={name: str(value) for name, value in _named(smk.wildcards).items()},
            log=[str(path) for path in smk.log],
            threads=int(smk.threads),
            resources={name: value for name, value in _named(smk.resources).items() if not name.startswith("_")},
        )


def _paths(value: str | list[str] | None) -> list[str]:
    return [value] if isinstance(value, str) else list(value or [])


def _named(items: Any) -> dict[str, Any]:
    """The named entries of a Snakemake Namedlist; a list-valued entry (an input function's list) as a list."""
    out = {}
    for name in items.keys():
        value = getattr(items, name)
        out[name] = [str(v) for v in value] if isinstance(value, list) else value
    return out
