"""Upstream Spica's `adapters:` section, read as an alias of Spica's own router and planner knobs.

NVIDIA's Sweeper (formerly Spica, now in AISimulate) moved the router's and the planner's search spaces out of
`search_space` into one adapter per Dynamo component, in its Dynamo-neutral configs (ai-dynamo/dynamo
`examples/aisimulate/spica/configs/smart_sweep.yaml`):

    adapters:
      dynamo.router:  {search_space: {mode: [kv_router, round_robin]}}
      dynamo.planner: {search_space: {scaling_policy: [disabled, throughput_180_5, hybrid_180_5]}}

Spica searches the same dimensions under its own names, so such a config is read as it is meant, not
refused as an unknown key: each adapter key is set on Spica's knob (`ALIASES`), and its values are judged by
that knob's own rules (a planner policy by the presets Spica knows, config/presets.py; a router mode by its
choices), each problem named by the adapter path the user wrote (config/origins.py). A dimension an adapter
leaves out takes Spica's default, as upstream's takes the adapter's. Refused, by path: another adapter,
another key, a value that is not a list, and a dimension given both here and in `search_space` (which one
would be meant?). What was read from where is kept in the config's `adapters_alias` block (Spica writes it),
and `spica validate` prints it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from spica_lib.config.origins import relabel
from spica_lib.config.strict import ConfigError, StrictModel

SECTION = "adapters"
# adapter -> its search-space key -> Spica's search_space knob (the same dimension, the same values)
ALIASES: dict[str, dict[str, str]] = {
    "dynamo.router": {
        "mode": "router_mode",
        "overlap_score_credit": "overlap_score_credit",
        "prefill_load_scale": "prefill_load_scale",
        "temperature": "router_temperature",
    },
    "dynamo.planner": {
        "scaling_policy": "planner_scaling_policy",
        "fpm_sampling": "planner_fpm_sampling",
        "load_sensitivity": "planner_load_sensitivity",
        "load_predictor_candidates": "load_predictor_candidates",
    },
}
ADAPTER_KEYS = ("search_space",)
ALIAS_BLOCK = "adapters_alias"
WRITTEN_BY_SPICA = "Spica writes it when it reads an `adapters:` section; write the adapters themselves"


class AdaptersAlias(StrictModel):
    """The config's `adapters_alias` block: the `adapters:` section a config was read from. Spica writes it."""

    given: dict[str, Any]  # the section as written
    mapping: list[str]  # "adapter path -> Spica setting", one line per dimension read
    origins: dict[str, str]  # Spica field path -> the adapter path it came from


def refuse_written_alias(data: dict[str, Any], source: str) -> None:
    """A config file that gives the `adapters_alias` block itself: Spica writes it, from an `adapters:` section."""
    if ALIAS_BLOCK in data:
        raise ConfigError([(ALIAS_BLOCK, WRITTEN_BY_SPICA)], source=source)


@dataclass
class ReadAdapters:
    """A config mapping with its `adapters:` section read onto `search_space`, and what was refused."""

    data: dict[str, Any]
    problems: list[tuple[str, str]] = field(default_factory=list)
    origins: dict[str, str] = field(default_factory=dict)

    def relabelled(self, problems: list[tuple[str, str]]) -> list[tuple[str, str]]:
        """The config's own problems, an aliased setting's named by the adapter path it came from."""
        return relabel(ConfigError(problems), self.origins, "config").problems


def read_adapters(data: dict[str, Any]) -> ReadAdapters:
    """`data` with its `adapters:` section (if any) moved onto `search_space`, recorded in `adapters_alias`
    (a normalised config, its alias already read, passes as it is)."""
    if SECTION not in data:
        return ReadAdapters(data)
    if data.get(ALIAS_BLOCK) is not None:
        return ReadAdapters(data, [(ALIAS_BLOCK, WRITTEN_BY_SPICA)])
    given = data[SECTION]
    rest = {key: value for key, value in data.items() if key != SECTION}
    if not isinstance(given, dict):
        return ReadAdapters(rest, [(SECTION, f"{given!r}: a mapping of adapters, {list(ALIASES)}")])
    space = dict(rest.get("search_space") or {}) if isinstance(rest.get("search_space"), dict) else None
    read = ReadAdapters(rest)
    mapping: list[str] = []
    for adapter, request in given.items():
        where = f"{SECTION}.{adapter}"
        keys = ALIASES.get(adapter)
        if keys is None:
            read.problems.append((where, f"an adapter Spica does not read; it reads {list(ALIASES)} as its own "
                                  "router and planner knobs"))  # fmt: skip
        elif not isinstance(request, dict):
            read.problems.append((where, f"{request!r}: a mapping with {list(ADAPTER_KEYS)}"))
        else:
            read.problems += [(f"{where}.{key}", f"unknown key; allowed keys here: {list(ADAPTER_KEYS)}")
                              for key in request if key not in ADAPTER_KEYS]  # fmt: skip
            _read_search_space(request.get("search_space"), f"{where}.search_space", keys, space, read, mapping)
    for adapter, keys in ALIASES.items():
        if adapter not in given:
            mapping.append(f"{SECTION}.{adapter} (not given) -> Spica's defaults of search_space {list(keys.values())}")
    if space is not None:
        read.data["search_space"] = space
    read.data[ALIAS_BLOCK] = {"given": given, "mapping": mapping, "origins": read.origins}
    return read


def _read_search_space(
    given: Any, where: str, keys: dict[str, str], space: dict[str, Any] | None, read: ReadAdapters, mapping: list[str]
) -> None:
    """One adapter's search space onto Spica's knobs; a dimension left out keeps Spica's default."""
    if given is None:
        return
    if not isinstance(given, dict):
        read.problems.append((where, f"{given!r}: a mapping of {list(keys)} to lists of values"))
        return
    for key, values in given.items():
        knob = keys.get(key)
        if knob is None:
            read.problems.append((f"{where}.{key}", f"not a dimension Spica reads from this adapter; it reads "
                                  f"{list(keys)} (as search_space {list(keys.values())})"))  # fmt: skip
        elif not isinstance(values, list):
            read.problems.append((f"{where}.{key}", f"{values!r}: a list of values (one pins, several are searched)"))
        elif space is not None and knob in space:
            read.problems.append((f"{where}.{key}", f"search_space.{knob} is given too: give the dimension in one "
                                  "place"))  # fmt: skip
        else:
            read.origins[f"search_space.{knob}"] = f"{where}.{key}"
            mapping.append(f"{where}.{key} -> search_space.{knob} {values}")
            if space is not None:  # without a search_space, the config's own check says it is missing
                space[knob] = values
    left = [key for key in keys if key not in given]
    if left:
        mapping.append(f"{where} {left} (not given) -> Spica's defaults of search_space "
                       f"{[keys[key] for key in left]}")  # fmt: skip
