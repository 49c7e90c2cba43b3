"""Your own measured rows: a CSV, or AIPerf exports with the deployment each measured.

Three inputs, each read into the same `SiliconRow`s the shipped rows are, so `spica fidelity --rows`
prints the same tables (docs/fidelity/calibration.md, "Your own measurements"):

- a CSV in aiconfigurator's `silicon_sample.csv` layout (told by its `silicon_ttft_ms` column), read
  as the shipped file is, except that a disagg row must write its worker counts;
- a CSV in the documented layout (`USER_COLUMNS`): one measured point per line;
- AIPerf exports: `profile_export_aiperf.json` as AIPerf 0.13.0 writes it (`AIPERF_SCHEMA`), each with a
  deployment description (`Deployment`, YAML), since an export holds the client's settings and
  statistics but not the GPUs, shapes or workers. One export with `--deployment FILE`, or a YAML
  file of `runs:`, each an `export:` path and a `deployment:`.

Only closed-loop measurements are replayed (a concurrency); a request-rate run is refused by name.
Every error names the file, the line or run, the field, the value and what is allowed.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from spica_lib.fidelity.silicon import RoleShape, SiliconRow, UnreadRow, _agg_row, disagg_row

AIPERF_SCHEMA = "AIPerf 0.13.0 profile_export_aiperf.json"


class RowsError(ValueError):
    """A user's rows file the stack cannot read or replay; the message names the field."""


class UserRow(BaseModel):
    """One line of the documented CSV layout. Blank optional cells take their defaults."""

    model_config = ConfigDict(extra="forbid")

    id: str | None = None
    system: str
    backend: Literal["vllm", "sglang", "trtllm"]
    backend_version: str  # the engine version measured (the replay runs the pinned perf DB's)
    model: str
    precision: str = ""  # "" or bf16: the model's own dtype; else fp8, fp4, int4 as the checkpoint is
    mode: Literal["agg", "disagg"]
    isl: int = Field(ge=1)
    osl: int = Field(ge=1)
    concurrency: int = Field(ge=1)
    ttft_ms: float = Field(gt=0)
    tpot_ms: float = Field(gt=0)
    tp: int = Field(default=1, ge=1)
    attention_dp: int = Field(default=1, ge=1)
    moe_tp: int = Field(default=1, ge=1)
    moe_ep: int = Field(default=1, ge=1)
    prefill_workers: int | None = Field(default=None, ge=1)
    prefill_tp: int = Field(default=1, ge=1)
    prefill_attention_dp: int = Field(default=1, ge=1)
    prefill_moe_tp: int = Field(default=1, ge=1)
    prefill_moe_ep: int = Field(default=1, ge=1)
    prefill_batch_size: int | None = Field(default=None, ge=1)
    decode_workers: int | None = Field(default=None, ge=1)
    decode_tp: int = Field(default=1, ge=1)
    decode_attention_dp: int = Field(default=1, ge=1)
    decode_moe_tp: int = Field(default=1, ge=1)
    decode_moe_ep: int = Field(default=1, ge=1)
    decode_batch_size: int | None = Field(default=None, ge=1)

    @model_validator(mode="after")
    def _workers_for_disagg(self) -> UserRow:
        if self.mode == "disagg":
            for role in ("prefill", "decode"):
                if getattr(self, f"{role}_workers") is None:
                    raise ValueError(f"{role}_workers: a disagg row must say how many {role} workers it measured")
        return self

    def silicon_row(self, default_id: str) -> SiliconRow:
        roles = {}
        if self.mode == "disagg":
            roles = {role: RoleShape(**{f: getattr(self, f"{role}_{name}") for f, name in ROLE_FIELDS.items()})
                     for role in ("prefill", "decode")}  # fmt: skip
        return SiliconRow(
            id=self.id or default_id, system=self.system, backend=self.backend, measured_version=self.backend_version,
            model=self.model, precision="" if self.precision == "bf16" else self.precision, isl=self.isl,
            osl=self.osl, concurrency=self.concurrency, ttft_ms=self.ttft_ms, tpot_ms=self.tpot_ms, mode=self.mode,
            **({"tp": self.tp, "attention_dp": self.attention_dp, "moe_tp": self.moe_tp, "moe_ep": self.moe_ep}
               if self.mode == "agg" else roles),
        )  # fmt: skip


ROLE_FIELDS = {"workers": "workers", "tp": "tp", "attention_dp": "attention_dp", "moe_tp": "moe_tp",
               "moe_ep": "moe_ep", "batch_size": "batch_size"}  # fmt: skip
USER_COLUMNS = tuple(UserRow.model_fields)


class RoleDescription(BaseModel):
    model_config = ConfigDict(extra="forbid")

    workers: int = Field(ge=1)
    tp: int = Field(default=1, ge=1)
    attention_dp: int = Field(default=1, ge=1)
    moe_tp: int = Field(default=1, ge=1)
    moe_ep: int = Field(default=1, ge=1)
    batch_size: int | None = Field(default=None, ge=1)


class Deployment(BaseModel):
    """What an AIPerf export measured, which the export does not hold: where and how the model was served."""

    model_config = ConfigDict(extra="forbid")

    system: str
    backend: Literal["vllm", "sglang", "trtllm"]
    backend_version: str
    model: str | None = None  # default: the export's first `input_config.endpoint.model_names`
    precision: str = ""
    mode: Literal["agg", "disagg"]
    tp: int = Field(default=1, ge=1)
    attention_dp: int = Field(default=1, ge=1)
    moe_tp: int = Field(default=1, ge=1)
    moe_ep: int = Field(default=1, ge=1)
    prefill: RoleDescription | None = None
    decode: RoleDescription | None = None

    @model_validator(mode="after")
    def _roles_match_mode(self) -> Deployment:
        if self.mode == "disagg" and (self.prefill is None or self.decode is None):
            raise ValueError("mode disagg: give prefill: and decode: (workers, tp, ...)")
        if self.mode == "agg" and (self.prefill is not None or self.decode is not None):
            raise ValueError("mode agg: prefill: and decode: describe a disagg deployment; give tp, attention_dp, ...")
        return self


class AIPerfRun(BaseModel):
    model_config = ConfigDict(extra="forbid")

    export: str  # a profile_export_aiperf.json, relative to the runs file
    deployment: Deployment


class AIPerfRuns(BaseModel):
    """A YAML file of AIPerf runs: `runs:`, each an `export:` path and its `deployment:`."""

    model_config = ConfigDict(extra="forbid")

    runs: list[AIPerfRun] = Field(min_length=1)


def read_rows(path: str, deployment: str | None = None) -> tuple[list[SiliconRow], list[UnreadRow]]:
    """The rows of a user's file (see the module's docstring), or RowsError naming what is wrong."""
    file = Path(path)
    if not file.is_file():
        raise RowsError(f"--rows {path}: no such file")
    if file.suffix == ".json":
        if deployment is None:
            raise RowsError(f"--rows {path}: an AIPerf export needs --deployment FILE (system, backend, shape, workers)")
        return [aiperf_row(file, _deployment(Path(deployment)))], []
    if deployment is not None:
        raise RowsError(f"--deployment {deployment}: only an AIPerf export (--rows FILE.json) takes a deployment")
    if file.suffix in (".yaml", ".yml"):
        runs = _validated(AIPerfRuns, _yaml(file), f"{path}")
        return [aiperf_row(file.parent / run.export, run.deployment, f"{path} runs[{i}]")
                for i, run in enumerate(runs.runs)], []  # fmt: skip
    if file.suffix == ".csv":
        return _csv_rows(file)
    raise RowsError(f"--rows {path}: a .csv, an AIPerf .json export, or a .yaml list of runs is allowed")


def _csv_rows(file: Path) -> tuple[list[SiliconRow], list[UnreadRow]]:
    with open(file, newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        header = reader.fieldnames or []
        lines = list(reader)
    if not lines:
        raise RowsError(f"{file}: no rows")
    if "silicon_ttft_ms" in header:
        return _silicon_layout(file, lines)
    if "request_rate" in header:
        raise RowsError(f"{file}: column 'request_rate': an open-loop row is not replayed yet; allowed: a closed loop, "
                        "its `concurrency`")  # fmt: skip
    unknown = [c for c in header if c not in USER_COLUMNS]
    if unknown:
        raise RowsError(f"{file}: unknown column {unknown[0]!r}; allowed: {', '.join(USER_COLUMNS)}, or the "
                        "silicon_sample.csv layout")  # fmt: skip
    rows = []
    for number, line in enumerate(lines, start=2):
        cells = {k: v for k, v in line.items() if v is not None and v.strip() != ""}
        user = _validated(UserRow, cells, f"{file} line {number}")
        rows.append(user.silicon_row(f"{file.stem}:{number}"))
    return rows, []


def _silicon_layout(file: Path, lines: list[dict[str, str]]) -> tuple[list[SiliconRow], list[UnreadRow]]:
    rows: list[SiliconRow] = []
    unread: list[UnreadRow] = []
    for number, raw in enumerate(lines, start=2):
        where = f"{file} line {number}"
        try:
            if raw["mode"] == "agg":
                rows.append(_agg_row(raw))
                continue
            if raw["mode"] != "disagg":
                raise RowsError(f"{where}: mode {raw['mode']!r}; allowed: agg, disagg")
            for role in ("prefill", "decode"):
                if not (raw.get(f"{role}_num_workers") or "").strip():
                    raise RowsError(f"{where}: {role}_num_workers is blank; a disagg row must say how many "
                                    f"{role} workers it measured")  # fmt: skip
            row = disagg_row(raw)
        except KeyError as missing:
            raise RowsError(f"{where}: column {missing.args[0]!r} missing (silicon_sample.csv layout)") from None
        except (ValueError, ValidationError) as bad:
            if isinstance(bad, RowsError):
                raise
            raise RowsError(f"{where}: {bad}") from None
        (rows if isinstance(row, SiliconRow) else unread).append(row)  # type: ignore[arg-type]
    return rows, unread


def aiperf_row(export: Path, deployment: Deployment, where: str | None = None) -> SiliconRow:
    """One AIPerf export as a row: its mean TTFT and inter-token latency, mean ISL/OSL and closed-loop concurrency,
    at the deployment described."""
    where = where or str(export)
    if not export.is_file():
        raise RowsError(f"{where}: export {export}: no such file")
    try:
        data = json.loads(export.read_text(encoding="utf-8"))
    except json.JSONDecodeError as bad:
        raise RowsError(f"{where}: {export} is not JSON ({bad})") from None
    loadgen = _field(data, ("input_config", "loadgen"), where, export, dict)
    concurrency = loadgen.get("concurrency")
    if not isinstance(concurrency, int) or concurrency < 1:
        rate = loadgen.get("request_rate")
        allowed = "a closed loop (aiperf profile --concurrency N); a request-rate run is not replayed"
        raise RowsError(f"{where}: input_config.loadgen.concurrency is {concurrency!r} (request_rate {rate!r}); "
                        f"allowed: {allowed}")  # fmt: skip
    model = deployment.model
    if model is None:
        names = _field(data, ("input_config", "endpoint", "model_names"), where, export, list)
        if not names:
            raise RowsError(f"{where}: input_config.endpoint.model_names is empty; give model: in the deployment")
        model = str(names[0])
    roles = {}
    if deployment.mode == "disagg":
        roles = {role: RoleShape(**getattr(deployment, role).model_dump()) for role in ("prefill", "decode")}
    shape = {"tp": deployment.tp, "attention_dp": deployment.attention_dp, "moe_tp": deployment.moe_tp,
             "moe_ep": deployment.moe_ep} if deployment.mode == "agg" else roles  # fmt: skip
    return SiliconRow(
        id=export.stem if export.stem != "profile_export_aiperf" else export.parent.name,
        system=deployment.system, backend=deployment.backend, measured_version=deployment.backend_version,
        model=model, precision="" if deployment.precision == "bf16" else deployment.precision,
        isl=round(_mean(data, "input_sequence_length", "tokens", where, export)),
        osl=round(_mean(data, "output_sequence_length", "tokens", where, export)),
        concurrency=concurrency,
        ttft_ms=_mean(data, "time_to_first_token", "ms", where, export),
        tpot_ms=_mean(data, "inter_token_latency", "ms", where, export),
        ttft_p90_ms=_p90(data, "time_to_first_token"), tpot_p90_ms=_p90(data, "inter_token_latency"),
        mode=deployment.mode, **shape,
    )  # fmt: skip


def _mean(data: dict[str, Any], metric: str, unit: str, where: str, export: Path) -> float:
    entry = _field(data, (metric,), where, export, dict)
    if entry.get("unit") != unit:
        raise RowsError(f"{where}: {metric}.unit is {entry.get('unit')!r} in {export}; allowed: {unit!r}")
    value = entry.get("avg")
    if not isinstance(value, int | float) or value <= 0:
        raise RowsError(f"{where}: {metric}.avg is {value!r} in {export}; allowed: a positive number")
    return float(value)


def _p90(data: dict[str, Any], metric: str) -> float | None:
    """The export's p90 of a metric (in the unit its mean was checked in), where it has a positive one."""
    value = (data.get(metric) or {}).get("p90")
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) and value > 0 else None


def _field(data: Any, keys: tuple[str, ...], where: str, export: Path, kind: type) -> Any:
    for depth, key in enumerate(keys):
        if not isinstance(data, dict) or key not in data:
            name = ".".join(keys[: depth + 1])
            raise RowsError(f"{where}: {name} missing from {export} (the {AIPERF_SCHEMA} layout)")
        data = data[key]
    if not isinstance(data, kind):
        raise RowsError(f"{where}: {'.'.join(keys)} is {data!r} in {export}; allowed: a {kind.__name__}")
    return data


def _deployment(path: Path) -> Deployment:
    return _validated(Deployment, _yaml(path), f"--deployment {path}")


def _yaml(path: Path) -> Any:
    if not path.is_file():
        raise RowsError(f"{path}: no such file")
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as bad:
        raise RowsError(f"{path}: not YAML ({bad})") from None


def _validated(model: type[BaseModel], data: Any, where: str) -> Any:
    try:
        return model.model_validate(data)
    except ValidationError as bad:
        first = bad.errors()[0]
        field = ".".join(str(part) for part in first["loc"]) or "(the whole entry)"
        if first["type"] == "missing":
            raise RowsError(f"{where}: {field}: required, and missing") from None
        if first["type"] == "extra_forbidden":
            allowed = ", ".join(model.model_fields)
            raise RowsError(f"{where}: {field}: not a field; allowed: {allowed}") from None
        raise RowsError(f"{where}: {field}: {first['msg']} (got {first.get('input')!r})") from None
