"""Send a rehearsal's requests to a live frontend and time every token: Spica's own small client on aiohttp.

Each request goes to `/v1/completions` (a prompt of n words is n tokens there: rehearsal/model_folder.py) with
`max_tokens` its output length, `ignore_eos`, streamed, and `nvext.extra_fields: [worker_id]` so every chunk
names the prefill and decode worker that served it. Open-loop requests are sent at their arrival times
divided by `speedup` (the mocker's steps run that much faster); a closed loop keeps its cap in flight.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass

from spica_lib.rehearsal.traffic import RehearsalTraffic, prompt

REQUEST_TIMEOUT_SECONDS = 300.0


@dataclass
class LiveRequest:
    """One request as the client saw it (times in seconds since the first send)."""

    index: int
    sent: float
    first_token: float | None = None
    last_token: float | None = None
    tokens: int = 0
    prefill_worker: str | None = None
    decode_worker: str | None = None
    error: str | None = None


@dataclass
class ClientRun:
    """One traffic run as the client saw it, and whether the machine kept up with it."""

    requests: list[LiveRequest]
    wall_seconds: float
    loop_lag_ms: list[float]  # how late the client's event loop woke, every LAG_TICK_SECONDS (a late loop times late)
    busy_share: float  # the machine's CPUs busy during the run, all processes (0-1)
    cores: int


LAG_TICK_SECONDS = 0.01
WARM_UP_REQUESTS = 2  # before any timed run: the frontend's and the workers' first request pays their cold start
WARM_UP_BLOCKS = 10**9  # block ids no traffic uses: a warm-up prompt leaves no prefix a timed request could reuse


def warm_up(url: str, model: str, traffic: RehearsalTraffic, words: int) -> None:
    """Send WARM_UP_REQUESTS of the traffic's size, one after another, untimed: the replay has no cold start, so the
    first timed request must not pay the live system's (a tokenizer loaded, a connection opened, a route learned)."""
    first = traffic.requests[0]
    for index in range(WARM_UP_REQUESTS):
        ids = tuple(WARM_UP_BLOCKS + index * 1000 + b for b in range(max(1, len(first.hash_ids))))
        request = first.model_copy(update={"arrival_ms": 0.0, "output_tokens": 2, "hash_ids": ids})
        asyncio.run(_send_all(url, model, RehearsalTraffic(requests=[request], in_flight_cap=1, source="warm-up"),
                              words, 1.0))  # fmt: skip


def send_traffic(url: str, model: str, traffic: RehearsalTraffic, words: int, speedup: float) -> ClientRun:
    """Every request of `traffic` sent to the frontend at `url`; their timings in request order, and the load."""
    import psutil

    before = psutil.cpu_times()
    started = time.perf_counter()
    requests, lags = asyncio.run(_send_all(url, model, traffic, words, speedup))
    return ClientRun(requests=requests, wall_seconds=time.perf_counter() - started, loop_lag_ms=lags,
                     busy_share=_busy_share(before, psutil.cpu_times()), cores=psutil.cpu_count() or 1)  # fmt: skip


def _busy_share(before, after) -> float:  # noqa: ANN001 - psutil's scputimes
    """The share of CPU time not idle (nor waiting on I/O) between two readings of the whole machine's times."""
    spent = {name: getattr(after, name) - getattr(before, name) for name in after._fields}
    total = sum(spent.values())
    idle = spent.get("idle", 0.0) + spent.get("iowait", 0.0)
    return (total - idle) / total if total > 0 else 0.0


async def _send_all(
    url: str, model: str, traffic: RehearsalTraffic, words: int, speedup: float
) -> tuple[list[LiveRequest], list[float]]:
    import aiohttp

    limit = traffic.in_flight_cap or len(traffic.requests)
    gate = asyncio.Semaphore(limit)
    connector = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_SECONDS)
    lags: list[float] = []
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        start = time.perf_counter()

        async def one(index: int) -> LiveRequest:
            request = traffic.requests[index]
            if traffic.in_flight_cap is None:
                await asyncio.sleep(max(0.0, request.arrival_ms / 1000.0 / speedup - (time.perf_counter() - start)))
            async with gate:
                return await _one(session, url, model, index, request, words, start)

        ticker = asyncio.create_task(_tick(lags))
        try:
            return list(await asyncio.gather(*(one(i) for i in range(len(traffic.requests))))), lags
        finally:
            ticker.cancel()


async def _tick(lags: list[float]) -> None:
    """Sleep LAG_TICK_SECONDS again and again, and record how late each wake-up came (the loop's lag)."""
    while True:
        asked = time.perf_counter()
        await asyncio.sleep(LAG_TICK_SECONDS)
        lags.append(max(0.0, (time.perf_counter() - asked - LAG_TICK_SECONDS) * 1000.0))


async def _one(session, url, model, index, request, words, start) -> LiveRequest:  # noqa: ANN001
    body = {
        "model": model,
        "prompt": prompt(request, words),
        "max_tokens": request.output_tokens,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},  # the token count from the server, not from chunk counting
        "nvext": {"extra_fields": ["worker_id"]},
    }
    seen = LiveRequest(index=index, sent=time.perf_counter() - start)
    try:
        async with session.post(f"{url}/v1/completions", json=body) as response:
            if response.status != 200:
                seen.error = f"HTTP {response.status}: {(await response.text())[:300]}"
                return seen
            async for raw in response.content:
                line = raw.decode().strip()
                if not line.startswith("data:") or line == "data: [DONE]":
                    continue
                chunk = json.loads(line[5:])
                workers = (chunk.get("nvext") or {}).get("worker_id") or {}
                seen.prefill_worker = str(workers.get("prefill_worker_id", seen.prefill_worker))
                seen.decode_worker = str(workers.get("decode_worker_id", seen.decode_worker))
                if any(choice.get("text") for choice in chunk.get("choices", [])):
                    now = time.perf_counter() - start
                    seen.first_token = seen.first_token if seen.first_token is not None else now
                    seen.last_token = now
                    seen.tokens += 1
                usage = chunk.get("usage") or {}
                if usage.get("completion_tokens"):
                    seen.tokens = int(usage["completion_tokens"])
    except Exception as exc:  # noqa: BLE001 - a request that failed is reported, not raised: the others go on
        seen.error = f"{type(exc).__name__}: {exc}"
    return seen
