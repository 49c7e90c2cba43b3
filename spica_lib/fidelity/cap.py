"""Which measured rows are replayed when a group holds more than a check can afford.

The disaggregated rows reach a concurrency of 15,000 and deployments of 144 GPUs; a closed loop of
`concurrency` slots replays `concurrency` x 8 requests. A cap keeps one run to minutes: per group of
rows measured alike (system, backend, measured version, model, precision, ISL/OSL: the ranking's
groups), rows above `max_concurrency` are not replayed, and of the rest at most `rows_per_group` are,
picked evenly along the group's order by (concurrency, GPUs, id), so both ends and the middle of the
group's range stay. Every row left out is counted with its reason, as the refusals are. With `per="model"`
the group is (system, backend, model) and its order (concurrency, ISL, OSL, GPUs, id): the rows kept then
spread over the model's loads and prompt lengths (the agg benches' selection, bench/fidelity_load.py).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from spica_lib.fidelity.silicon import SiliconRow


class RowCap(BaseModel):
    """At most `rows_per_group` rows per group, none above `max_concurrency` (None: no bound)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    rows_per_group: int | None = Field(default=None, ge=2)
    max_concurrency: int | None = Field(default=None, ge=1)
    per: Literal["shape", "model"] = "shape"  # a group: rows measured alike, or every row of one model

    def describe(self) -> str:
        parts = []
        if self.max_concurrency is not None:
            parts.append(f"concurrency <= {self.max_concurrency}")
        if self.rows_per_group is not None and self.per == "model":
            parts.append(f"at most {self.rows_per_group} rows per (system, backend, model), evenly along its "
                         "(concurrency, ISL, OSL) order")  # fmt: skip
        elif self.rows_per_group is not None:
            parts.append(f"at most {self.rows_per_group} rows per group, evenly along its (concurrency, GPUs) order")
        return ", ".join(parts) or "no cap"


DISAGG_CAP = RowCap(rows_per_group=8, max_concurrency=1024)  # the bench's: about 5 min of CPU for every disagg group


def group_key(row: SiliconRow) -> tuple:
    return (row.system, row.backend, row.measured_version, row.model, row.precision, row.isl, row.osl)


def capped(rows: Iterable[SiliconRow], cap: RowCap) -> tuple[list[SiliconRow], dict[str, str]]:
    """(the rows kept, in their order; row id -> why each other row is left out)."""
    rows = list(rows)
    left_out: dict[str, str] = {}
    groups: dict[tuple, list[SiliconRow]] = {}
    for row in rows:
        if cap.max_concurrency is not None and row.concurrency > cap.max_concurrency:
            left_out[row.id] = f"over the replay cap: concurrency above {cap.max_concurrency}"
        else:
            key = (row.system, row.backend, row.model) if cap.per == "model" else group_key(row)
            groups.setdefault(key, []).append(row)
    for members in groups.values():
        if cap.rows_per_group is None or len(members) <= cap.rows_per_group:
            continue
        if cap.per == "model":
            ordered = sorted(members, key=lambda r: (r.concurrency, r.isl, r.osl, r.gpus, r.id))
        else:
            ordered = sorted(members, key=lambda r: (r.concurrency, r.gpus, r.id))
        last, picks = len(ordered) - 1, cap.rows_per_group - 1
        chosen = {round(i * last / picks) for i in range(cap.rows_per_group)}
        for index, row in enumerate(ordered):
            if index not in chosen:
                where = "of its model" if cap.per == "model" else "in its group"
                left_out[row.id] = f"over the replay cap: more than {cap.rows_per_group} rows {where}"
    return [row for row in rows if row.id not in left_out], left_out
