"""The benchmarks' conversation-shaped trace generator (bench/conversation_trace.py)."""

import json
import math
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

from conversation_trace import BLOCK, DURATION_MS, write_conversation_trace  # noqa: E402


def records(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_seed_fixes_the_trace_and_the_count_and_the_hour_are_exact(tmp_path):
    a = write_conversation_trace(tmp_path / "a.jsonl", requests=600, seed=3)
    b = write_conversation_trace(tmp_path / "b.jsonl", requests=600, seed=3)
    c = write_conversation_trace(tmp_path / "c.jsonl", requests=600, seed=4)
    assert a.read_bytes() == b.read_bytes() != c.read_bytes()
    rows = records(a)
    assert len(rows) == 600
    stamps = [r["timestamp"] for r in rows]
    assert stamps == sorted(stamps) and 0 <= stamps[0] and stamps[-1] < DURATION_MS
    assert all(len(r["hash_ids"]) == math.ceil(r["input_length"] / BLOCK) and r["output_length"] >= 1 for r in rows)


def test_a_later_turn_starts_with_the_full_blocks_of_the_turn_before(tmp_path):
    rows = records(write_conversation_trace(tmp_path / "t.jsonl", requests=2000, seed=0))
    first_seen = {}
    follow_ups = 0
    for row in rows:
        ids = row["hash_ids"]
        earlier = [first_seen[i] for i in ids if i in first_seen]
        if earlier and ids[0] in first_seen:
            follow_ups += 1
            # the ids seen before form a prefix: a conversation's history, never a block in the middle
            assert ids[: len(earlier)] == [i for i in ids if i in first_seen]
        for i in ids:
            first_seen.setdefault(i, row["timestamp"])
    assert follow_ups > len(rows) // 3  # multi-turn: many prompts reuse their conversation's blocks
    inputs = sorted(r["input_length"] for r in rows)
    mean = sum(inputs) / len(inputs)
    assert 5000 < mean < 20000 and inputs[-1] > 4 * inputs[len(inputs) // 2]  # thousands, heavy-tailed
