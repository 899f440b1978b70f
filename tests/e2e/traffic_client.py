"""A load client for the traffic tests, run inside a local node's network namespace:

    ip netns exec qm-local-a python tests/e2e/traffic_client.py HOST PORT --rate 100 --seconds 30

Sends ``GET /`` on a new connection per request at a fixed rate (each request on its own
schedule, not waiting for the previous one) and prints one JSON line when done: requests made,
answered 200, failed (with the first few errors), and the answers counted by the text the
server sent (the pod's name). Standard library only: it runs under ``ip netns exec``.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import time


async def one(host: str, port: int, timeout: float) -> str:
    reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
    try:
        writer.write(f"GET / HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
        raw = await asyncio.wait_for(reader.read(), timeout)
    finally:
        writer.close()
    head, _, body = raw.partition(b"\r\n\r\n")
    status = head.split(b" ", 2)[1] if head.count(b" ") >= 2 else b""
    if status != b"200":
        raise RuntimeError(f"answer {head[:60]!r}")
    return body.decode().strip()


async def main(host: str, port: int, rate: float, seconds: float, timeout: float) -> dict:
    by_answer: collections.Counter[str] = collections.Counter()
    errors: list[str] = []
    failed = 0
    latencies: list[float] = []

    async def request() -> None:
        nonlocal failed
        t0 = time.monotonic()
        try:
            by_answer[await one(host, port, timeout)] += 1
            latencies.append(time.monotonic() - t0)
        except Exception as exc:  # every failure counts, whatever it is
            failed += 1
            if len(errors) < 10:
                errors.append(f"{time.monotonic() - start:.2f}s {type(exc).__name__}: {exc}")

    start = time.monotonic()
    tasks = []
    n = int(rate * seconds)
    for i in range(n):
        delay = start + i / rate - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.ensure_future(request()))
    await asyncio.gather(*tasks)
    latencies.sort()
    return {
        "requests": n,
        "ok": sum(by_answer.values()),
        "failed": failed,
        "errors": errors,
        "by_answer": dict(by_answer),
        "elapsed": round(time.monotonic() - start, 2),
        "p99_ms": round(latencies[int(len(latencies) * 0.99) - 1] * 1000, 1) if latencies else None,
    }


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("host")
    p.add_argument("port", type=int)
    p.add_argument("--rate", type=float, default=100.0)
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--timeout", type=float, default=5.0)
    a = p.parse_args()
    print(json.dumps(asyncio.run(main(a.host, a.port, a.rate, a.seconds, a.timeout))), flush=True)
