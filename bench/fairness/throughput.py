"""What flow control costs one ordinary client: a single non-admin principal's sustained
write throughput through one of two API servers (so the server has its half of the level's
seats), closed loop at a few concurrencies, creating ConfigMaps as fast as answers come back.

    python -m bench.fairness.throughput [--seconds 10] [--concurrency 1,8,32,64]

Run it at the settings to compare (``QM_API_SEATS`` and the other flow-control variables are
read from the environment by the servers). Prints and writes
``bench/results/fairness-throughput-<stamp>.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from app.api.fairness import env_config
from app.core import fairness as core
from bench.common import Stack, percentile, write_result
from bench.fairness.cluster import API, flow_figures, start_servers, tenant


async def closed_loop(
    api: httpx.AsyncClient, url: str, token: str, workers: int, seconds: float
) -> dict[str, Any]:
    auth = {"Authorization": f"Bearer {token}"}
    coll = f"{url}{API}/namespaces/writer/configmaps"
    counts: Counter[str] = Counter()
    lat: list[float] = []
    deadline = time.monotonic() + seconds

    async def worker() -> None:
        tag = secrets.token_hex(4)
        i = 0
        while time.monotonic() < deadline:
            i += 1
            body = {"metadata": {"name": f"w-{tag}-{i}"}, "data": {"k": "v" * 64}}
            t0 = time.monotonic()
            r = await api.post(coll, headers=auth, json=body)
            if r.status_code == 201:
                counts["created"] += 1
                lat.append(time.monotonic() - t0)
            else:
                counts[str(r.status_code)] += 1

    t0 = time.monotonic()
    await asyncio.gather(*(worker() for _ in range(workers)))
    elapsed = time.monotonic() - t0
    return {
        "concurrency": workers,
        "creates_per_s": counts["created"] / elapsed,
        "p50_ms": percentile(lat, 50) * 1000,
        "p99_ms": percentile(lat, 99) * 1000,
        "other_statuses": {k: v for k, v in counts.items() if k != "created"},
    }


async def bench(args: argparse.Namespace, stack: Stack, logs: Path) -> dict[str, Any]:
    env = {**os.environ, "DATABASE_URL": stack.url, "QM_STREAM_DATABASE_URL": stack.url,
           "QM_BOOTSTRAP_TOKEN": stack.token, "PYTHONUNBUFFERED": "1"}  # fmt: skip
    env.pop("QM_BROKER_URL", None)
    servers = start_servers(env, stack.token, 2, logs)
    total, _, _ = env_config(env)
    limits = httpx.Limits(max_connections=200, max_keepalive_connections=200)
    out = []
    try:
        async with httpx.AsyncClient(timeout=60, limits=limits) as api:
            api.base_url = httpx.URL(servers[0].url)
            token = await tenant(stack.url, api, stack.token, "writer", "writer")
            for _ in range(100):  # both servers count each other before measuring
                if (await flow_figures(api, servers[0].url, "writer"))["servers"] == 2:
                    break
                await asyncio.sleep(0.1)
            await closed_loop(api, servers[0].url, token, 8, 2.0)  # warm up
            for c in args.concurrency:
                out.append(await closed_loop(api, servers[0].url, token, c, args.seconds))
                print(json.dumps(out[-1]), flush=True)
    finally:
        for s in servers:
            s.stop()
    return {
        "runs": out,
        "settings": {"seats": total, "servers": 2, "seconds": args.seconds,
                     "seats_on_this_server": core.seat_limits(total, 2)[core.GLOBAL_DEFAULT]},
    }  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.fairness.throughput", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--concurrency", type=lambda s: [int(x) for x in s.split(",")],
                   default=[1, 8, 32, 64])  # fmt: skip
    args = p.parse_args(argv)
    stack = Stack()
    try:
        result = asyncio.run(bench(args, stack, Path(stack.tmp) / "logs"))
    finally:
        stack.close()
    print(f"wrote {write_result('fairness-throughput', result)}")


if __name__ == "__main__":
    main()
