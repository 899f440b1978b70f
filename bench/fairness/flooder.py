"""The flooding principal of the fairness benchmark, in a process of its own so its client's
CPU does not slow the measured team's: closed-loop workers spread over the API servers, each
creating ConfigMaps and listing a large namespace back to back, ignoring ``Retry-After`` (a
runaway client), in the odd ``--slice``-second slices from monotonic time ``--start`` (the
even ones are the team's quiet slices) for ``--seconds`` in all. Every other list has a label
selector that matches nothing: the server still walks the whole namespace, and the list is
estimated at its full cost, but the flooder's own CPU is not spent reading the answer, so more
of the flood reaches the servers. Prints one JSON line of counts.

    python -m bench.fairness.flooder --urls URL,URL --token T --start T0 --seconds 60 --slice 6
"""

from __future__ import annotations

import argparse
import asyncio
import json
import secrets
import sys
import time
from collections import Counter
from pathlib import Path

import httpx
import uvloop

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.fairness.cluster import API

LISTS_EVERY = 4  # one list per three creates


async def worker(
    api: httpx.AsyncClient, base: str, token: str, args: argparse.Namespace, counts: Counter[str]
) -> None:
    auth = {"Authorization": f"Bearer {token}"}
    deadline = args.start + args.seconds
    tag = secrets.token_hex(3)
    i = 0
    while (now := time.monotonic()) < deadline:
        k = int((now - args.start) // args.slice) if now >= args.start else -1
        if k % 2 == 0 or k < 0:  # a quiet slice, or not started: wait for the next flood slice
            await asyncio.sleep(args.start + (k + 1) * args.slice - now)
            continue
        i += 1
        op = "list" if i % LISTS_EVERY == 0 else "create"
        try:
            if op == "list":
                sel = {"labelSelector": "none=none"} if i % (2 * LISTS_EVERY) else {}
                url = f"{base}{API}/namespaces/{args.list_ns}/configmaps"
                r = await api.get(url, headers=auth, params=sel)
            else:
                cm = {"metadata": {"name": f"f-{tag}-{i}"}, "data": {"k": "v" * 64}}
                r = await api.post(
                    f"{base}{API}/namespaces/{args.write_ns}/configmaps", headers=auth, json=cm
                )
        except httpx.HTTPError:
            counts[f"{op}_error"] += 1
            continue
        if r.status_code == 429:
            counts[f"{op}_rejected"] += 1
        elif r.status_code < 300:
            counts[f"{op}_accepted"] += 1
        else:
            counts[f"{op}_status_{r.status_code}"] += 1


async def main(args: argparse.Namespace) -> None:
    urls = args.urls.split(",")
    counts: Counter[str] = Counter()
    limits = httpx.Limits(max_connections=args.workers, max_keepalive_connections=args.workers)
    async with httpx.AsyncClient(timeout=60, limits=limits) as api:
        await asyncio.gather(
            *(worker(api, urls[i % len(urls)], args.token, args, counts)
              for i in range(args.workers))
        )  # fmt: skip
    flooding = args.seconds / args.slice // 2 * args.slice  # the odd slices' seconds
    print(json.dumps({"seconds": flooding, **counts}), flush=True)


if __name__ == "__main__":
    p = argparse.ArgumentParser(prog="python -m bench.fairness.flooder")
    p.add_argument("--urls", required=True)
    p.add_argument("--token", required=True)
    p.add_argument("--start", type=float, required=True, help="time.monotonic() of slice 0")
    p.add_argument("--seconds", type=float, default=60.0)
    p.add_argument("--slice", type=float, default=6.0)
    p.add_argument("--workers", type=int, default=32)
    p.add_argument("--list-ns", default="flood")
    p.add_argument("--write-ns", default="flood-writes")
    uvloop.run(main(p.parse_args()))
