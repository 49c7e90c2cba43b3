"""A branch's share of the finish, replayed while another branch still searches.

The finish (results/sequential.py) starts once every branch has told its last round. On a real trace
one branch (typically agg) ends its rounds well before another, and its cores would idle until then.
The sweep's top `finish_top` distinct deployments are each among their own branch's top `finish_top`,
so a branch that has told its last round knows which of its deployments the finish may look at: its
share replays aiconfigurator's pick first (a baseline that needs only the config, when the branch did not
replay it itself: "<key>+baseline", baselines/plan.py), then their first look's samples ("<key>#<i>", the names the finish gives them) into the
sweep's journal, in its ranking's order, while some other branch is still searching; then the stress
test's first replays of its top `stress_top` ("<key>~<perturbation>", results/stress.py), its #1 under
every perturbation. The finish, the baselines and the stress test then restore what the share replayed instead of
replaying it (trial/store.py `run_replay_job`).

A share changes no result: a sample's replay is the same whoever runs it. It changes only where the
CPU goes. It stops as soon as every other branch has told its last round (the finish then takes the
rest at the sweep's full width), and does nothing for the branch that ends last. A deployment it
replayed that the sweep's top leaves out was replayed on a core that would have idled.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

SCHEMA_VERSION = 1


class FinishShare(BaseModel):
    """Artifact `finish_shares/<branch>.json`: what a branch's share of the finish replayed ahead of it."""

    model_config = ConfigDict(extra="forbid")

    schema_version: int = SCHEMA_VERSION
    kind: Literal["finish_share"] = "finish_share"
    branch: str
    planned: list[str] = Field(default_factory=list)  # first-look samples, then first stress replays, in rank order
    replayed: list[str] = Field(default_factory=list)  # those it replayed (or found journaled) before it stopped
    stopped: str = ""  # why it stopped where it did
