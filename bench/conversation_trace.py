"""A conversation-shaped Mooncake trace, generated from a seed: multi-turn chats over about an hour.

Shaped like Mooncake's public conversation trace (12,031 requests over 1 h; its published means are
about 12k input and 343 output tokens): requests come in conversations, and each turn's prompt is
the conversation so far (every earlier prompt and answer) plus the new user message, so the turns
of one conversation share their leading KV blocks. Some conversations also open with one of a few
shared system prompts. `hash_ids` are 512-token block ids (Dynamo's `trace_block_size`): a turn
keeps the ids of the previous turn's full prompt blocks (the same tokens in the same place) and
takes fresh ids for the rest. Lengths are heavy-tailed (lognormal user messages with an occasional
pasted document, lognormal answers), capped at `MAX_INPUT` tokens of context.

Arrivals: conversations start at random over the hour, at a rate that drifts with a slow wave
(busier and quieter quarters, as a real hour is); a turn follows the previous one after the answer
and a think time. Turns past the hour are dropped, and conversations are added until exactly
`requests` requests lie inside it.

Generated files are kept out of git: `conversation_trace()` writes them once under
`results/.bench-traces/` (or `$SPICA_BENCH_TRACES`), named by the request count, the seed and
`FORMAT_VERSION`, and reuses them while those match.

With the defaults (12,031 requests, seed 0): 3,599 s, mean input 11.8k tokens (median 8.2k, p99 53k),
mean output 323 (median 246), 61 % of its blocks seen before in the trace (`--stats` prints these).

Run: .venv/bin/python bench/conversation_trace.py [--requests 12031] [--seed 0] [--out PATH] [--stats]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from spica_lib.base.artifacts import atomic_write_text

FORMAT_VERSION = 1  # bump whenever the generator's output for a (requests, seed) changes
BLOCK = 512  # tokens per hash id
DURATION_MS = 3_600_000
MAX_INPUT = 65_536  # a conversation stops growing once its context would pass this
SYSTEM_PROMPTS = [(3, 0.2), (6, 0.1), (1, 0.15)]  # (blocks, share of conversations) of the shared system prompts
TURNS_MEAN = 2.6  # turns per conversation: 1 + geometric, mean 2.6
FIRST_MESSAGE = (8.3, 1.1)  # lognormal (mu, sigma) of the first user message: median ~4k tokens
LATER_MESSAGE = (6.5, 1.3)  # later messages: median ~670 tokens, a long tail
DOCUMENT = (0.12, (8.8, 0.7))  # a later turn pastes a document with this chance: median ~6.6k tokens
ANSWER = (5.5, 0.75, 2048)  # lognormal answer length (mu, sigma), capped: median ~245, mean ~330
THINK_MS = (10.3, 0.8)  # lognormal think time between an answer and the next turn: median ~30 s
ANSWER_MS_PER_TOKEN = 25.0  # the time a turn's answer is assumed to take to stream, per output token
RATE_WAVE = 0.35  # conversation starts: rate x (1 + RATE_WAVE sin(...)), two waves over the hour


def write_conversation_trace(path: str | Path, requests: int = 12031, seed: int = 0) -> Path:
    """Write `requests` conversation-shaped Mooncake records (JSONL, sorted by timestamp) to `path`."""
    if requests < 1:
        raise ValueError(f"requests must be a positive count, got {requests}")
    rng = random.Random(seed)
    ids = _Ids()
    shared = [ids.take(blocks) for blocks, _ in SYSTEM_PROMPTS]
    records: list[dict] = []
    while len(records) < requests:
        turns = _conversation(rng, ids, shared)
        records.extend(turns[: requests - len(records)])  # the last one may end early: its first turns only
    records.sort(key=lambda r: r["timestamp"])
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(target, "".join(json.dumps(r) + "\n" for r in records))
    return target


def conversation_trace(requests: int = 12031, seed: int = 0) -> Path:
    """The trace for (requests, seed), generated once into the cache folder (kept out of git) and reused."""
    folder = Path(os.environ.get("SPICA_BENCH_TRACES", REPO / "results" / ".bench-traces"))
    path = folder / f"conversation-n{requests}-s{seed}-v{FORMAT_VERSION}.jsonl"
    return path if path.is_file() else write_conversation_trace(path, requests, seed)


class _Ids:
    """Fresh 512-token block ids, never reused within a trace."""

    def __init__(self) -> None:
        self.next = 0

    def take(self, count: int) -> list[int]:
        self.next += count
        return list(range(self.next - count, self.next))


def _conversation(rng: random.Random, ids: _Ids, shared: list[list[int]]) -> list[dict]:
    """One conversation's turns that arrive inside the hour (possibly none)."""
    at = _start_ms(rng)
    system: list[int] = []
    pick, threshold = rng.random(), 0.0
    for (_, share), blocks in zip(SYSTEM_PROMPTS, shared, strict=True):
        threshold += share
        if pick < threshold:
            system = blocks
            break
    turns = 1 + _geometric(rng, TURNS_MEAN - 1)
    context = len(system) * BLOCK  # tokens of the conversation so far
    blocks = list(system)  # the ids of its full blocks so far
    records = []
    for turn in range(turns):
        message = _lognormal(rng, *(FIRST_MESSAGE if turn == 0 else LATER_MESSAGE))
        if turn > 0 and rng.random() < DOCUMENT[0]:
            message += _lognormal(rng, *DOCUMENT[1])
        prompt = context + max(1, message)
        if prompt > MAX_INPUT or at >= DURATION_MS:
            break
        answer = min(ANSWER[2], max(1, _lognormal(rng, ANSWER[0], ANSWER[1])))
        # The earlier full blocks are the same tokens in the same place; the rest of the prompt is new.
        kept = blocks[: context // BLOCK]
        hash_ids = kept + ids.take(math.ceil(prompt / BLOCK) - len(kept))
        records.append({"timestamp": round(at), "input_length": prompt, "output_length": answer, "hash_ids": hash_ids})
        blocks, context = hash_ids, prompt + answer
        at += answer * ANSWER_MS_PER_TOKEN + _lognormal(rng, *THINK_MS)
    return records


def _start_ms(rng: random.Random) -> float:
    """A conversation's start: uniform over the hour, thinned by a slow wave of the rate (rejection)."""
    while True:
        at = rng.random() * DURATION_MS
        rate = 1.0 + RATE_WAVE * math.sin(2 * math.pi * 2 * at / DURATION_MS)
        if rng.random() * (1.0 + RATE_WAVE) < rate:
            return at


def _lognormal(rng: random.Random, mu: float, sigma: float) -> int:
    return round(rng.lognormvariate(mu, sigma))


def _geometric(rng: random.Random, mean: float) -> int:
    """Failures before a success, with the given mean (0 for mean 0)."""
    if mean <= 0:
        return 0
    p = 1.0 / (1.0 + mean)
    return int(math.log(1.0 - rng.random()) / math.log(1.0 - p))


def stats(path: Path) -> dict[str, float]:
    """What the trace holds: requests, span, input and output lengths, and the share of blocks seen before."""
    records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    inputs = sorted(r["input_length"] for r in records)
    outputs = [r["output_length"] for r in records]
    seen: set[int] = set()
    reused = total = 0
    for r in records:
        reused += sum(1 for block in r["hash_ids"] if block in seen)
        total += len(r["hash_ids"])
        seen.update(r["hash_ids"])
    return {
        "requests": len(records),
        "span_s": (records[-1]["timestamp"] - records[0]["timestamp"]) / 1000,
        "mean_input": statistics.fmean(inputs),
        "median_input": inputs[len(inputs) // 2],
        "p99_input": inputs[int(0.99 * (len(inputs) - 1))],
        "max_input": inputs[-1],
        "mean_output": statistics.fmean(outputs),
        "median_output": sorted(outputs)[len(outputs) // 2],
        "reused_block_share": reused / max(1, total),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=12031)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", help="write here instead of the cache folder")
    parser.add_argument("--stats", action="store_true", help="also print what the trace holds")
    args = parser.parse_args()
    if args.out:
        path = write_conversation_trace(args.out, args.requests, args.seed)
    else:
        path = conversation_trace(args.requests, args.seed)
    print(path)
    if args.stats:
        print(json.dumps(stats(path), indent=2))


if __name__ == "__main__":
    main()
