"""What the reclaim controller's 10 s tick costs at fleet size.

``python -m bench.controllers.reclaim_cost [--nodes 10000] [--pods 10] [--minutes 60]
[--runs 3] [--per-key 500]``

On a fresh embedded PostgreSQL (or ``DATABASE_URL``) and an embedded Redis: ``--nodes`` nodes
with ``--pods`` pods bound to each (a fifth of them production, priority 2000), and
``--minutes`` of usage history per node at one sample per 10 s, written through the usage
store's own encoding. Then, in this process, with the controller's own functions:

* one **warm-up tick** (every node gets its first figure: a status write each), timed;
* ``--runs`` **steady ticks** over every node in chunks of ``QM_RECLAIM_CHUNK`` (500), what
  each chunk task of ``reclaim_sweep`` runs (``reconcile_nodes``);
* ``--runs`` passes of the **per-key path** (``reconcile_key``, one node at a time, what the
  dispatcher's per-node tasks run) over ``--per-key`` nodes, scaled to the whole fleet. This is
  a lower bound for a tick made of per-node tasks: Celery's own cost per task (a broker round
  trip to fetch, one to acknowledge, the pending marker) is not in it.

For each, wall time and CPU of this process, PostgreSQL and Redis, as medians; the figure to
read is CPU-seconds per tick against the 10 s the tick has. Also the size of one history entry
against the whole sample it summarises, and Redis' memory per node-hour of history. Results go
to ``bench/results/reclaim-cost-<stamp>.json`` with the machine description.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import os
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg

from bench.common import Stack, machine, median, write_result
from bench.controllers.job import copy_nodes
from bench.scheduler.run import cpu_seconds, postgres_cpu_seconds

PROD_PRIORITY, BATCH_PRIORITY = 2000, 100
NS = "reclaim-bench"


def _node_name(i: int) -> str:
    return f"node-{i:05d}"


def load_state(url: str, nodes: int, pods: int) -> None:
    """Nodes with 16 CPU / 64 GiB; per node a fifth of ``pods`` production pods requesting
    2 CPU / 4 GiB and the rest batch pods requesting 250m / 512 MiB."""
    with psycopg.connect(url, autocommit=True) as db:
        copy_nodes(db, nodes, cpu="16", memory="64Gi")
        prod = max(1, pods // 5)
        for start in range(0, nodes, 1000):
            buf = io.StringIO()
            for i in range(start, min(nodes, start + 1000)):
                for j in range(pods):
                    production = j < prod
                    cpu, mem = ("2", "4Gi") if production else ("250m", "512Mi")
                    spec = {
                        "nodeName": _node_name(i),
                        "priority": PROD_PRIORITY if production else BATCH_PRIORITY,
                        "containers": [{"name": "c", "image": "busybox",
                                        "resources": {"requests": {"cpu": cpu, "memory": mem}}}],
                    }  # fmt: skip
                    buf.write(f"{uuid.uuid4()}\t{NS}\tp-{i:05d}-{j:03d}\t{json.dumps(spec)}\n")
            with (
                db.transaction(),
                db.cursor() as cur,
                cur.copy("COPY pods (uid, namespace, name, spec) FROM STDIN") as cp,
            ):
                cp.write(buf.getvalue())
        db.execute("ANALYZE")


def _sample(node: str, at: float, pods: int, step: int) -> Any:
    from app.store.usage import NodeSample, PodUsage

    prod = max(1, pods // 5)
    # Production uses a quarter to a half of what it requests, batch about what it asks.
    prod_cpu = prod * (500 + (step * 37) % 500)
    batch_cpu = (pods - prod) * 250
    members = (
        PodUsage(NS, "prod", "u1", PROD_PRIORITY, prod_cpu, prod * (1 << 30)),
        PodUsage(NS, "batch", "u2", BATCH_PRIORITY, batch_cpu, (pods - prod) * (400 << 20)),
    )
    return NodeSample(node, at, prod_cpu + batch_cpu, sum(p.memory_bytes for p in members),
                      members)  # fmt: skip


async def load_history(redis_url: str, nodes: int, pods: int, minutes: int, now: float) -> None:
    """``minutes`` of samples per node, the newest at ``now``, in the store's own history
    encoding (``record`` also keeps the latest figures and the pod index, which the controller
    does not read, and files one sample per call: too slow for millions)."""
    import redis.asyncio as aioredis

    from app.store.usage import HISTORY_PREFIX, encode_history

    client = aioredis.Redis.from_url(redis_url)
    steps = minutes * 6
    try:
        for start in range(0, nodes, 50):
            pipe = client.pipeline(transaction=False)
            for i in range(start, min(nodes, start + 50)):
                name = _node_name(i)
                series = b"".join(
                    encode_history(_sample(name, at, pods, step), int(at * 1000))
                    for step in range(steps)
                    for at in [now - (steps - 1 - step) * 10.0]
                )
                pipe.set(HISTORY_PREFIX + name, series)
            await pipe.execute()
    finally:
        await client.aclose()


class Meter:
    """CPU of this process, PostgreSQL and Redis, and wall time, over a block."""

    def __init__(self, postmaster: int | None, redis_pid: int | None) -> None:
        self.postmaster, self.redis_pid = postmaster, redis_pid

    def read(self) -> tuple[float, float, float, float]:
        redis_cpu = cpu_seconds(self.redis_pid) if self.redis_pid else float("nan")
        return (time.monotonic(), time.process_time(), postgres_cpu_seconds(self.postmaster),
                redis_cpu)  # fmt: skip

    @staticmethod
    def diff(a: tuple[float, ...], b: tuple[float, ...]) -> dict[str, float]:
        wall, proc, pg, rds = (y - x for x, y in zip(a, b, strict=True))
        return {"wall_s": wall, "controller_cpu_s": proc, "postgres_cpu_s": pg,
                "redis_cpu_s": rds, "all_cpu_s": proc + pg + rds}  # fmt: skip


def summary(samples: list[dict[str, float]], scale: float = 1.0) -> dict[str, Any]:
    keys = samples[0].keys()
    return {k: median([s[k] * scale for s in samples]) for k in keys} | {"samples": samples}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=10_000)
    ap.add_argument("--pods", type=int, default=10)
    ap.add_argument("--minutes", type=int, default=60)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--per-key", type=int, default=500)
    args = ap.parse_args()

    from app.devstack.redis import EmbeddedRedis

    stack = Stack()
    redis_dir = Path(tempfile.mkdtemp(prefix="qm-bench-redis-"))
    rds = EmbeddedRedis(redis_dir)
    try:
        redis_url = rds.start()
        os.environ["DATABASE_URL"] = stack.url
        os.environ["QM_BROKER_URL"] = redis_url
        now = time.time()
        t0 = time.monotonic()
        load_state(stack.url, args.nodes, args.pods)
        print(f"state: {args.nodes} nodes, {args.nodes * args.pods} pods "
              f"in {time.monotonic() - t0:.0f} s")  # fmt: skip
        t0 = time.monotonic()
        import redis as sync_redis

        before = int(sync_redis.Redis.from_url(redis_url).info("memory")["used_memory"])
        asyncio.run(load_history(redis_url, args.nodes, args.pods, args.minutes, now))
        after = int(sync_redis.Redis.from_url(redis_url).info("memory")["used_memory"])
        print(f"history: {args.minutes} min per node in {time.monotonic() - t0:.0f} s, "
              f"{(after - before) / 2**20:.0f} MiB")  # fmt: skip
        result = measure(args, stack, rds, now)
        result["history_bytes_per_node_hour"] = (after - before) / args.nodes * 60 / args.minutes
    finally:
        rds.stop()
        stack.close()
    path = write_result("reclaim-cost", {"machine": machine(), "args": vars(args), **result})
    print(f"results: {path}")


def measure(args: Any, stack: Stack, rds: Any, now: float) -> dict[str, Any]:
    from app.store.usage import ContainerUsage, NodeSample, PodUsage, encode, encode_history
    from workers.app import RECLAIM_CHUNK
    from workers.controllers import reclaim
    from workers.runtime import Runtime

    names = [_node_name(i) for i in range(args.nodes)]
    meter = Meter(stack.pg.pid if stack.pg else None, rds.pid)
    rt = Runtime()
    # Every tick reads at the history's end, `now`: loading took minutes, and samples that
    # old would count as gone. The same inputs each tick: the steady state, nothing to write.
    at = now

    def tick() -> dict[str, float]:
        a = meter.read()
        again: dict[str, float] = {}
        for i in range(0, len(names), RECLAIM_CHUNK):
            again |= rt.run(reclaim.reconcile_nodes(rt, names[i : i + RECLAIM_CHUNK], at))
        b = meter.read()
        return Meter.diff(a, b) | {"to_look_again": float(len(again))}

    def per_key() -> dict[str, float]:
        some = names[:: max(1, len(names) // args.per_key)][: args.per_key]
        a = meter.read()
        for name in some:
            rt.run(reclaim.reconcile_key(rt, "", name, at))
        b = meter.read()
        return Meter.diff(a, b)

    try:
        warm = tick()
        print(f"warm-up tick: {warm['wall_s']:.2f} s wall, {warm['all_cpu_s']:.2f} CPU-s")
        ticks = [tick() for _ in range(args.runs)]
        for t in ticks:
            print(f"tick: {t['wall_s']:.2f} s wall, CPU-s controller {t['controller_cpu_s']:.2f}"
                  f" postgres {t['postgres_cpu_s']:.2f} redis {t['redis_cpu_s']:.2f}")  # fmt: skip
        keyed = [per_key() for _ in range(args.runs)]
        scale = args.nodes / min(args.per_key, args.nodes)
        for k in keyed:
            print(f"per-key x{args.per_key}: {k['wall_s']:.2f} s wall, "
                  f"{k['all_cpu_s']:.2f} CPU-s (x{scale:.0f} for the fleet)")  # fmt: skip
    finally:
        if rt._pool is not None:
            rt.run(rt._pool.close())
        rt.loop.close()

    # One whole sample as the agents send it (each pod with its container) against the
    # records the history keeps of it: production and batch, as loaded above.
    prod = max(1, args.pods // 5)
    whole = NodeSample(names[0], now, 0, 0, tuple(
        PodUsage(NS, f"p-{j:03d}", str(uuid.uuid4()), PROD_PRIORITY if j < prod else BATCH_PRIORITY,
                 100, 1 << 28, (ContainerUsage("c", 100, 1 << 28),))
        for j in range(args.pods)
    ))  # fmt: skip
    return {
        "chunk": RECLAIM_CHUNK,
        "warm_up_tick": warm,
        "tick": summary(ticks),
        "per_key_fleet_estimate": summary(keyed, scale),
        "per_key_nodes": min(args.per_key, args.nodes),
        "tick_cpu_share_of_10s": statistics.median(t["all_cpu_s"] for t in ticks) / 10.0,
        "history_bytes_per_sample": len(encode_history(whole, int(now * 1000))),
        "whole_sample_bytes": len(encode(whole)),
    }


if __name__ == "__main__":
    main()
