"""Send a rehearsal's requests to a live frontend and time every token: Spica's own small client on aiohttp.

Each request goes to `/v1/completions` (a prompt of n words is n tokens there: deploy/model_folder.py) with
`max_tokens` its output length, `ignore_eos`, streamed, and `nvext.extra_fields: [worker_id]` so every chunk
names the prefill and decode worker that served it. Open-loop requests are sent at their arrival times
divided by `speedup` (the mocker's steps run that much faster); a closed loop keeps its cap in flight.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass

from spica_lib.deploy.rehearsal_traffic import RehearsalTraffic, prompt

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


def send_traffic(url: str, model: str, traffic: RehearsalTraffic, words: int, speedup: float) -> list[LiveRequest]:
    """Every request of `traffic` sent to the frontend at `url`; their timings, in request order."""
    return asyncio.run(_send_all(url, model, traffic, words, speedup))


async def _send_all(url: str, model: str, traffic: RehearsalTraffic, words: int, speedup: float) -> list[LiveRequest]:
    import aiohttp

    limit = traffic.in_flight_cap or len(traffic.requests)
    gate = asyncio.Semaphore(limit)
    connector = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_SECONDS)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        start = time.perf_counter()

        async def one(index: int) -> LiveRequest:
            request = traffic.requests[index]
            if traffic.in_flight_cap is None:
                await asyncio.sleep(max(0.0, request.arrival_ms / 1000.0 / speedup - (time.perf_counter() - start)))
            async with gate:
                return await _one(session, url, model, index, request, words, start)

        return list(await asyncio.gather(*(one(i) for i in range(len(traffic.requests)))))


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
