"""Store benchmark: conditional writes/s through the store layer (single and batched), the
commit-to-watcher latency of the HTTP watch under that load, each beside raw ``pgbench``
conditional updates on the same server in the same run, and the API server's resident memory
with 300,000 pods in its watch cache.

    python bench/store/run.py [--seconds 10] [--runs 3] [--pods 300000]

Writes ``bench/results/store-<timestamp>.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import msgspec

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.common import Stack, machine, median, percentile, rss_mib, write_result

WRITERS = 8
PER_WRITER = 500
PAD = "x" * 1400


def pod(ns: str, name: str) -> dict[str, Any]:
    return {
        "metadata": {"namespace": ns, "name": name, "labels": {"app": "bench", "shard": name[-1]}},
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "registry.local/bench@sha256:" + "a" * 64,
                    "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}},
                    "env": [{"name": "PAD", "value": PAD}],
                }
            ],
            "priority": 0,
            "schedulerName": "default-scheduler",
        },
        "status": {"phase": "Pending", "seq": 0},
    }


class _Meta(msgspec.Struct):
    name: str = ""


class _Status(msgspec.Struct):
    seq: int = -1


class _Obj(msgspec.Struct):
    metadata: _Meta = msgspec.field(default_factory=_Meta)
    status: _Status = msgspec.field(default_factory=_Status)


class _Event(msgspec.Struct):
    object: _Obj


_events = msgspec.json.Decoder(_Event)


class Latency:
    def __init__(self) -> None:
        self.committed: dict[tuple[str, int], float] = {}
        self.samples: list[float] = []


async def watch_latency(url: str, token: str, rv: str, lat: Latency, stop: asyncio.Event) -> None:
    headers = {"Authorization": f"Bearer {token}"}
    async with (
        httpx.AsyncClient(base_url=url, headers=headers, timeout=None) as c,
        c.stream(
            "GET",
            "/apis/quaymaster.io/v1/namespaces/bench/pods",
            # Bookmarks let the loop notice the end even when no event is pending; the server
            # ends the stream by itself after timeoutSeconds.
            params={
                "watch": "1",
                "resourceVersion": rv,
                "allowWatchBookmarks": "true",
                "timeoutSeconds": "120",
            },
        ) as resp,
    ):
        async for line in resp.aiter_lines():
            now = time.monotonic()
            if not line:
                continue
            if '"BOOKMARK"' not in line:
                obj = _events.decode(line).object  # only the fields the measurement needs
                t = lat.committed.pop((obj.metadata.name, obj.status.seq), None)
                if t is not None:
                    lat.samples.append((now - t) * 1000)
            if stop.is_set() and not lat.committed:
                return


def settle(stack: Stack) -> None:
    """Wait until the revision stream has stopped advancing for a second (the writers are done
    and its backlog is drained) and the API's cache has caught up with it."""
    import psycopg

    headers = {"Authorization": f"Bearer {stack.token}"}
    last = -1
    with psycopg.connect(stack.url, autocommit=True) as db:
        for _ in range(600):
            row = db.execute("SELECT last_revision FROM qm_stream_state").fetchone()
            rev = int(row[0]) if row else 0
            text = httpx.get(f"{stack.api_url}/metrics", headers=headers).text
            cached = next(
                int(line.split()[-1])
                for line in text.splitlines()
                if line.startswith("qm_watch_cache_revision ")
            )
            if rev == last and cached >= rev:
                return
            last = rev
            time.sleep(1.0)
    raise RuntimeError("the revision stream did not catch up")


async def run_store(
    stack: Stack, seconds: float, batched: bool, rate: float | None = None, batch: int = PER_WRITER
) -> dict[str, float]:
    """Writers at full speed, or paced to ``rate`` writes/s in total (batches of ``batch``)."""
    from app.core.kinds import BY_KIND
    from app.store.db import create_pool
    from app.store.store import Store

    kind = BY_KIND["Pod"]
    pool = await create_pool(stack.url, max_size=WRITERS + 2)
    store = Store(pool)
    current = {s.obj["metadata"]["name"]: s for s in await store.list_objects(kind, "bench")}
    rv = httpx.get(
        f"{stack.api_url}/apis/quaymaster.io/v1/namespaces/bench/pods?limit=1",
        headers={"Authorization": f"Bearer {stack.token}"},
    ).json()["metadata"]["resourceVersion"]
    lat = Latency()
    stop = asyncio.Event()
    watcher = asyncio.create_task(watch_latency(stack.api_url, stack.token, rv, lat, stop))
    await asyncio.sleep(0.3)
    done = 0
    conflicts = 0
    deadline = time.monotonic() + seconds

    async def writer(w: int) -> None:
        nonlocal done, conflicts
        names = [f"p{w}-{i}" for i in range(PER_WRITER)]
        seq = 0
        next_t = time.monotonic() + (w / WRITERS) * (batch * WRITERS / rate if rate else 0)
        chunk = 0
        while time.monotonic() < deadline:
            if rate:
                await asyncio.sleep(max(0.0, next_t - time.monotonic()))
                next_t += batch * WRITERS / rate
            if batched:
                seq += 1
                items = []
                group = names[chunk * batch : (chunk + 1) * batch]
                chunk = (chunk + 1) % (PER_WRITER // batch)
                status = {"phase": "Running", "seq": seq}
                for n in group:
                    obj = {"metadata": {"namespace": "bench", "name": n}, "status": status}
                    items.append((obj, current[n].row_version))
                written, lost = await store.update_status_many(kind, items)
                t = time.monotonic()
                for wr in written:
                    current[wr.name].row_version = wr.row_version
                    lat.committed[(wr.name, seq)] = t
                done += len(written)
                conflicts += lost
            else:
                for n in names:
                    if time.monotonic() >= deadline:
                        break
                    seq += 1
                    obj = dict(current[n].obj)
                    obj["status"] = {"phase": "Running", "seq": seq}
                    s = await store.update_status(kind, obj, current[n].row_version)
                    lat.committed[(n, seq)] = time.monotonic()
                    current[n] = s
                    done += 1

    t0 = time.monotonic()
    await asyncio.gather(*(writer(w) for w in range(WRITERS)))
    elapsed = time.monotonic() - t0
    stop.set()
    try:
        await asyncio.wait_for(watcher, 60)
    except TimeoutError:
        watcher.cancel()
    await pool.close()
    return {
        "writes_per_s": done / elapsed,
        "conflicts": conflicts,
        "watch_p50_ms": percentile(lat.samples, 50),
        "watch_p99_ms": percentile(lat.samples, 99),
        "watch_samples": len(lat.samples),
        "undelivered": len(lat.committed),
    }


def vacuum(stack: Stack) -> None:
    """Start every phase from tidy tables and a fresh checkpoint, so no phase pays for the dead
    rows or the WAL of another."""
    import psycopg

    with psycopg.connect(stack.url, autocommit=True) as db:
        db.execute("VACUUM (ANALYZE) pods, bench_rows")
        db.execute("CHECKPOINT")


def pgbench(stack: Stack, seconds: float, batched: bool) -> float:
    from app.devstack.postgres import EmbeddedPostgres

    exe = str(stack.pg.pgbench_path if stack.pg else EmbeddedPostgres(Path("/")).pgbench_path)
    rows = WRITERS * PER_WRITER
    if batched:
        # Each client owns its 500 rows, as each store writer owns its 500 objects.
        script = (
            f"UPDATE bench_rows SET version = version + 1 WHERE id > :client_id * {PER_WRITER}"
            f" AND id <= :client_id * {PER_WRITER} + {PER_WRITER} AND version >= 0;\n"
        )
    else:
        script = (
            f"\\set id random(1, {rows})\n"
            "UPDATE bench_rows SET version = version + 1 WHERE id = :id AND version >= 0;\n"
        )
    with tempfile.NamedTemporaryFile("w", suffix=".sql", delete=False) as f:
        f.write(script)
    Path(f.name).chmod(0o644)
    out = subprocess.run(
        [
            exe,
            "-n",
            "-c",
            str(WRITERS),
            "-j",
            "2",
            "-T",
            str(int(seconds)),
            "-f",
            f.name,
            stack.url,
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    tps = next(
        float(line.split("=")[1].split()[0])
        for line in out.splitlines()
        if line.startswith("tps =")
    )
    return tps * (PER_WRITER if batched else 1)


async def setup(stack: Stack) -> None:
    from app.core.kinds import BY_KIND
    from app.store.db import create_pool
    from app.store.store import Store

    pool = await create_pool(stack.url)
    store = Store(pool)
    await store.create(
        BY_KIND["Namespace"], {"metadata": {"name": "bench"}, "spec": {}, "status": {}}
    )
    objs = [pod("bench", f"p{w}-{i}") for w in range(WRITERS) for i in range(PER_WRITER)]
    await store.create_many(BY_KIND["Pod"], objs)
    await pool.execute(
        "CREATE TABLE bench_rows (id int PRIMARY KEY, version bigint NOT NULL,"
        " payload text NOT NULL) WITH (fillfactor = 75)"
    )
    await pool.execute(
        "INSERT INTO bench_rows SELECT g, 0, repeat('x', 2000)"
        f" FROM generate_series(1, {WRITERS * PER_WRITER}) g"
    )
    await pool.close()


async def memory(stack: Stack, total: int) -> dict[str, float]:
    from app.core.kinds import BY_KIND
    from app.store.db import create_pool
    from app.store.store import Store

    pool = await create_pool(stack.url)
    store = Store(pool)
    await store.create(
        BY_KIND["Namespace"], {"metadata": {"name": "mem"}, "spec": {}, "status": {}}
    )
    t0 = time.monotonic()
    for start in range(0, total, 5000):
        await store.create_many(
            BY_KIND["Pod"], [pod("mem", f"m{i}") for i in range(start, min(total, start + 5000))]
        )
    insert_s = time.monotonic() - t0
    await pool.close()
    want = total + WRITERS * PER_WRITER
    headers = {"Authorization": f"Bearer {stack.token}"}
    while True:
        text = httpx.get(f"{stack.api_url}/metrics", headers=headers).text
        count = next(
            int(line.split()[-1])
            for line in text.splitlines()
            if line.startswith('qm_watch_cache_objects{kind="Pod"}')
        )
        if count >= want:
            break
        await asyncio.sleep(0.5)
    streamed_s = time.monotonic() - t0
    assert stack.api is not None
    live_rss = rss_mib(stack.api.pid)
    stack.stop_api()
    load_s = stack.start_api()
    assert stack.api is not None
    return {
        "pods": total,
        "insert_s": insert_s,
        "inserted_and_streamed_s": streamed_s,
        "api_rss_mib_after_streaming": live_rss,
        "api_restart_load_s": load_s,
        "api_rss_mib_after_restart": rss_mib(stack.api.pid),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--pods", type=int, default=300_000)
    ap.add_argument("--rates", default="2500,5000", help="paced phases: writes/s in total")
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so the servers get stopped
    stack = Stack()
    try:
        stack.start_api()
        asyncio.run(setup(stack))
        runs: dict[str, list[Any]] = {
            "store_single": [],
            "store_batched": [],
            "pgbench_single": [],
            "pgbench_batched": [],
        }
        rates = [float(r) for r in args.rates.split(",")]
        for _ in range(args.runs):
            # Each phase starts once the stream has caught up with the one before, so no
            # phase pays for another's backlog.
            settle(stack)
            vacuum(stack)
            runs["store_single"].append(asyncio.run(run_store(stack, args.seconds, False)))
            settle(stack)
            vacuum(stack)
            runs["pgbench_single"].append(pgbench(stack, args.seconds, False))
            for rate in rates:
                settle(stack)
                vacuum(stack)
                runs.setdefault(f"store_paced_{int(rate)}", []).append(
                    asyncio.run(run_store(stack, args.seconds, True, rate=rate, batch=50))
                )
            settle(stack)
            vacuum(stack)
            runs["store_batched"].append(asyncio.run(run_store(stack, args.seconds, True)))
            settle(stack)
            vacuum(stack)
            runs["pgbench_batched"].append(pgbench(stack, args.seconds, True))
        summary: dict[str, Any] = {}
        for mode in ("single", "batched"):
            store_runs = runs[f"store_{mode}"]
            s = median([r["writes_per_s"] for r in store_runs])
            p = median(runs[f"pgbench_{mode}"])
            summary[mode] = {
                "store_writes_per_s": round(s),
                "pgbench_writes_per_s": round(p),
                "ratio_store_to_pgbench": round(s / p, 3),
                "watch_p50_ms": round(median([r["watch_p50_ms"] for r in store_runs]), 1),
                "watch_p99_ms": round(median([r["watch_p99_ms"] for r in store_runs]), 1),
            }
        for rate in rates:
            paced = runs[f"store_paced_{int(rate)}"]
            summary[f"paced_{int(rate)}"] = {
                "target_writes_per_s": rate,
                "store_writes_per_s": round(median([r["writes_per_s"] for r in paced])),
                "batch": 50,
                "watch_p50_ms": round(median([r["watch_p50_ms"] for r in paced]), 1),
                "watch_p99_ms": round(median([r["watch_p99_ms"] for r in paced]), 1),
            }
        mem = asyncio.run(memory(stack, args.pods)) if args.pods else {}
        result = {
            "benchmark": "store",
            "machine": machine(),
            "writers": WRITERS,
            "objects": WRITERS * PER_WRITER,
            "seconds_per_run": args.seconds,
            "runs": args.runs,
            "summary": summary,
            "raw": runs,
            "memory": mem,
            "notes": "PostgreSQL, the API server and this load generator share the 2 cores; "
            "medians over runs; pgbench runs the same conditional UPDATE shape "
            "on a 2 KB-row table in the same server.",
        }
        path = write_result("store", result)
        print(json.dumps({"summary": summary, "memory": mem}, indent=2))
        print(f"written {path}")
    finally:
        stack.close()


if __name__ == "__main__":
    main()
