"""What quota admission adds to pod creates.

``python -m bench.controllers.quota_cost [--runs 5] [--batch 2000] [--existing 0,10000]``

On a fresh embedded PostgreSQL (or ``DATABASE_URL``) with the migrations applied, for each
count of pods already in the namespace (``--existing``), times through ``Store``:

* ``create_many`` of ``--batch`` pods (the ReplicaSet controller's largest batch), and
* 200 single ``create`` calls one after another (what the API does per request),

in a namespace without any ResourceQuota and in one with a quota that applies to every pod
(``pods``, ``requests.cpu``, ``requests.memory``, ``limits.memory``) and is never exceeded.
Each case runs ``--runs`` times in a namespace of its own; medians are reported. Results go to
``bench/results/quota-cost-<stamp>.json`` with the machine description.
"""

from __future__ import annotations

import argparse
import asyncio
import time
import uuid
from typing import Any

from bench.common import Stack, machine, median, write_result

SINGLES = 200


def pods(ns: str, count: int) -> list[dict[str, Any]]:
    res = {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "256Mi"}}
    return [
        {
            "apiVersion": "quaymaster.io/v1",
            "kind": "Pod",
            "metadata": {"namespace": ns, "name": f"p-{uuid.uuid4().hex[:12]}"},
            "spec": {"containers": [{"name": "c", "image": "busybox", "resources": res}]},
        }
        for _ in range(count)
    ]


async def one_case(store: Any, existing: int, batch: int, with_quota: bool) -> dict[str, float]:
    from app.core.kinds import BY_KIND

    pod_kind, rq = BY_KIND["Pod"], BY_KIND["ResourceQuota"]
    ns = f"bench-{uuid.uuid4().hex[:8]}"
    if with_quota:
        hard = {"pods": "1000000", "requests.cpu": "100000", "requests.memory": "100Ti",
                "limits.memory": "200Ti"}  # fmt: skip
        obj = {"kind": "ResourceQuota", "metadata": {"namespace": ns, "name": "q"}}
        await store.create(rq, {**obj, "spec": {"hard": hard}})
    for start in range(0, existing, 2000):
        await store.create_many(pod_kind, pods(ns, min(2000, existing - start)))
    await store.pool.execute("ANALYZE pods")
    t0 = time.perf_counter()
    created = await store.create_many(pod_kind, pods(ns, batch))
    many = time.perf_counter() - t0
    assert len(created) == batch
    singles = pods(ns, SINGLES)
    t0 = time.perf_counter()
    for p in singles:
        await store.create(pod_kind, p)
    single = (time.perf_counter() - t0) / SINGLES
    return {"create_many_s": many, "single_create_ms": single * 1000}


async def run(url: str, runs: int, batch: int, existing: list[int]) -> list[dict[str, Any]]:
    from app.store.db import create_pool
    from app.store.store import Store

    pool = await create_pool(url, min_size=1, max_size=4)
    store = Store(pool)
    rows = []
    try:
        for n in existing:
            for with_quota in (False, True):
                samples = [await one_case(store, n, batch, with_quota) for _ in range(runs)]
                row = {
                    "existing_pods": n,
                    "quota": with_quota,
                    "create_many_s": median([s["create_many_s"] for s in samples]),
                    "single_create_ms": median([s["single_create_ms"] for s in samples]),
                    "samples": samples,
                }
                rows.append(row)
                print(
                    f"existing={n:>6} quota={with_quota!s:<5} "
                    f"create_many({batch})={row['create_many_s'] * 1000:8.1f} ms  "
                    f"single create={row['single_create_ms']:6.2f} ms"
                )
    finally:
        await pool.close()
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--batch", type=int, default=2000)
    ap.add_argument("--existing", default="0,10000")
    args = ap.parse_args()
    existing = [int(x) for x in args.existing.split(",")]
    stack = Stack()
    try:
        rows = asyncio.run(run(stack.url, args.runs, args.batch, existing))
    finally:
        stack.close()
    path = write_result(
        "quota-cost",
        {"machine": machine(), "runs": args.runs, "batch": args.batch, "results": rows},
    )
    print(f"results: {path}")


if __name__ == "__main__":
    main()
