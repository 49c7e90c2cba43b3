"""A knob's engine spelling (config/knobs.py), read from and written into a worker container's command.

A worker runs one of two kinds of command: an argv (`command` + `args`: the generator writes vLLM's so), or a
`bash -c` script that builds an `args` array and `exec`s the engine (SGLang's and TRT-LLM's), TRT-LLM's engine
settings in the YAML the script writes (`cat > <file> <<'YAML' ... YAML`). Reading takes the words as an argument
parser would (the last occurrence wins); writing appends to the argv, adds an `args+=(...)` line before the script's
`exec`, or sets the key in the engine YAML. What cannot be written is left for the check (deploy/settings.py) to
name.
"""

from __future__ import annotations

import json
import re
import shlex
from typing import Any

import yaml

from spica_lib.config.knobs import EngineYaml, Flag, JsonFlag, Spelling, Switch

ENGINE_YAML = re.compile(r"<<'YAML'\n(.*?)\nYAML\n", re.DOTALL)


class Flags:
    """A command's words, looked up like an argument parser would (last occurrence wins)."""

    def __init__(self, words: list[str]):
        self.words = words

    def value(self, *names: str) -> str | None:
        found = None
        for index, word in enumerate(self.words):
            for name in names:
                if word == name and index + 1 < len(self.words):
                    found = self.words[index + 1]
                elif word.startswith(f"{name}="):
                    found = word.split("=", 1)[1]
        return found

    def has(self, name: str) -> bool:
        return name in self.words

    def number(self, *names: str) -> float | None:
        text = self.value(*names)
        return None if text is None else float(text)


def is_script(main: dict[str, Any]) -> bool:
    command = list(main.get("command") or [])
    return command[-2:] == ["/bin/bash", "-c"] or command[-1:] == ["-c"]


def command_words(main: dict[str, Any]) -> tuple[list[str], dict[str, Any] | None]:
    """The words a container's command runs the engine with, and TRT-LLM's engine YAML where the script writes one."""
    command, args = list(main.get("command") or []), list(main.get("args") or [])
    if is_script(main):
        script = args[0] if args else ""
        engine = ENGINE_YAML.search(script)
        words = [_unwrap(word) for word in shlex.split(ENGINE_YAML.sub("\n", script), comments=True)]
        return words, (yaml.safe_load(engine.group(1)) if engine else None)
    return [*command, *args], None


def _unwrap(word: str) -> str:
    """A bash array's word without its `args=(` / `args+=(` opener or `)` closer."""
    return re.sub(r"^\w+\+?=\(", "", word).removesuffix(")")


def read(spelling: Spelling, flags: Flags, engine_yaml: dict[str, Any], inert: Any) -> Any:
    """The value a command gives a knob spelled so; `inert` (the table's value that changes nothing) when it says
    nothing, a switch's `absent` for a switch. A value whose companions say another thing is returned as words."""
    if isinstance(spelling, Switch):
        if spelling.off and flags.has(spelling.off):
            return False
        return True if spelling.on and flags.has(spelling.on) else spelling.absent
    if isinstance(spelling, JsonFlag):
        given = json.loads(flags.value(spelling.name) or "{}")
        return _with_fixed(given.get(spelling.key), given, spelling.fixed, inert)
    if isinstance(spelling, EngineYaml):
        parent, key = _yaml_parent(engine_yaml, spelling.path, create=False)
        return _with_fixed(parent.get(key), parent, spelling.fixed, inert)
    text = flags.value(spelling.name, *spelling.aliases)
    value = None if text is None else _number_or_word(text)
    if value is None or (spelling.positive and (isinstance(value, str) or value <= 0)):
        return inert
    for companion, accepted in (spelling.also(value) if spelling.also else {}).items():
        found = flags.value(companion)
        if found is None or not any(_same_word(found, one) for one in accepted):
            return f"{_word(value)} with {companion} {found}"
    return value


def _number_or_word(text: str) -> float | str:
    try:
        return float(text)
    except ValueError:
        return text


def _with_fixed(value: Any, holder: dict[str, Any], fixed: dict[str, Any], inert: Any) -> Any:
    if value is None:
        return inert
    wrong = {key: holder.get(key) for key, wanted in fixed.items() if holder.get(key) != wanted}
    return f"{value} with {wrong}" if wrong else value


def _same_word(found: str, wanted: Any) -> bool:
    try:
        return float(found) == float(wanted)
    except (TypeError, ValueError):
        return found == str(wanted)


def _yaml_parent(engine: dict[str, Any], path: str, create: bool) -> tuple[dict[str, Any], str]:
    *parents, key = path.split(".")
    node = engine
    for part in parents:
        if not isinstance(node.get(part), dict):
            if not create:
                return {}, key
            node[part] = {}
        node = node[part]
    return node, key


def write(main: dict[str, Any], spelling: Spelling, value: Any) -> bool:
    """Write `value` into a worker container's command as `spelling` says it. False: this command has no place for it
    (the check then names it)."""
    if isinstance(spelling, EngineYaml):
        return _write_yaml(main, spelling, value)
    if isinstance(spelling, Switch):
        flag, drop = (spelling.on, spelling.off) if value else (spelling.off, spelling.on)
        removed = _remove(main, drop) if drop else False
        return _append(main, [flag]) if flag else removed or value == spelling.absent
    if isinstance(spelling, JsonFlag):
        return _append(main, [spelling.name, json.dumps({**spelling.fixed, spelling.key: value})])
    words = [spelling.name, _word(value)]
    for companion, accepted in (spelling.also(value) if spelling.also else {}).items():
        words += [companion, _word(accepted[0])]
    return _append(main, words)


def _word(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def _append(main: dict[str, Any], words: list[str]) -> bool:
    if not is_script(main):
        main.setdefault("args", []).extend(words)
        return True
    script = main["args"][0]
    lines = script.split("\n")
    at = next((i for i in range(len(lines) - 1, -1, -1) if lines[i].lstrip().startswith("exec ")), None)
    if at is None:
        return False
    lines.insert(at, f"args+=({' '.join(shlex.quote(word) for word in words)})")
    main["args"][0] = "\n".join(lines)
    return True


def _remove(main: dict[str, Any], flag: str) -> bool:
    if not is_script(main):
        before = list(main.get("args") or [])
        main["args"] = [word for word in before if word != flag]
        return main["args"] != before
    script = main["args"][0]
    main["args"][0] = re.sub(rf"(?<=\s){re.escape(flag)}(?=\s|\))", "", script)
    return main["args"][0] != script


def _write_yaml(main: dict[str, Any], spelling: EngineYaml, value: Any) -> bool:
    script = (main.get("args") or [""])[0] if is_script(main) else ""
    found = ENGINE_YAML.search(script)
    if found is None:
        return False
    engine = yaml.safe_load(found.group(1)) or {}
    parent, key = _yaml_parent(engine, spelling.path, create=True)
    parent[key] = value
    parent.update(spelling.fixed)
    text = yaml.safe_dump(engine, sort_keys=False).rstrip("\n")
    main["args"][0] = script[: found.start(1)] + text + script[found.end(1) :]
    return True
