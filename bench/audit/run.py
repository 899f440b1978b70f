"""Change-history benchmark (ADR 0052): what recording every write costs, in one run.

    python -m bench.audit.run [--rounds 6] [--seconds 5] [--writers 8] [--pods 200]
                              [--nodes 10000] [--renewals 3] [--mix-status 2]
                              [--mix-renewals 3]

A throwaway embedded PostgreSQL migrated with ``alembic upgrade head`` (``bench.common.Stack``,
no API server), written through the store layer (``app.store.store.Store``) with a write
context on every write, as the API and the controllers write.

* **Throughput with and without history.** ``--writers`` concurrent writers each loop over
  create, update and delete of a ConfigMap (every one of those writes is stored in the history:
  the worst case; a status-only write would only be counted). Rounds alternate history off
  (the history triggers disabled) and on (enabled), ``--seconds`` each, so the shared machine's
  other load weighs on both alike. The revisioner runs through every round, as the control
  plane runs it: it decodes each write into the revision stream and, as leader, seals the
  history once a second (``--no-revisioner``: PostgreSQL alone, the bench sealing in the on
  rounds). Reported: writes/s per round and the median ratio on/off (target >= 0.8); and,
  since the shared machine's load swings from round to round, the CPU per write of the server
  (its processes' ``/proc`` times, the revisioner's WAL sender among them) and of its clients
  (this one and the revisioner), off and on, and their ratio.
* **Throughput with and without history, the pods' write mix.** The same interleaved off/on
  rounds, with the store's real write mix for pods instead: each writer holds one node and its
  lease and takes pods through their lifecycle as the control plane writes them, each write with
  its writer's context: create (``Store.create``, the API); bind (the scheduler's
  ``bind_many`` statement); status Pending, then Running, then Ready (``Store.update_status``,
  the agent); ``--mix-status`` status-only writes that change no promoted column (a fresh
  probe time on the Ready condition, as the agent's periodic writes); mark deleting
  (``Store.delete``, the API) and the node's confirmation (``Store.delete`` with grace 0 and
  the uid, the agent); and ``--mix-renewals`` conditional updates of the node's lease per
  lifecycle (``Store.update``, as the agent renews every 10 s: a pod living 30 s on a node
  running one pod at a time). With the defaults that is 12 writes per lifecycle, 7 stored
  (create, bind, Pending, Running, Ready, mark, delete) and 5 only counted (the status-only
  writes and the renewals); the JSON records the composition and the history rows and counts
  the on rounds actually produced.
* **Bytes per pod lifecycle.** ``--pods`` pods each go through create, bind (``spec.nodeName``),
  Running, Ready and delete (graceful: marked deleting, then removed). Reported: history rows
  and their bytes (``pg_column_size``) per lifecycle, and the growth on disk of the history
  (heap and indexes, and the chain's links) per lifecycle before and after sealing and
  ``VACUUM``.
* **Growth per hour for ``--nodes`` hollow nodes renewing leases.** Every node's lease in
  ``kube-node-lease`` is renewed ``--renewals`` times by ``--writers`` connections; the rows the
  history gained, the counting rows (``qm_history_tally``), and the summary rows once the hour
  is folded (the hour is moved back rather than waited for). Projected to an hour at the agent's
  renewal interval (10 s): rows and bytes the history gains per hour with the summarising rule,
  and what it would gain storing each renewal (bytes of a stored lease update row measured).

Writes ``bench/results/audit-<stamp>.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import asyncpg
import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from agent.lease import LEASE_NAMESPACE
from app.core.audit import WriteContext
from app.core.kinds import BY_KIND
from app.scheduler.binder import Bind, bind_many
from app.store.db import create_pool
from app.store.history import Sealer, seal_all
from app.store.store import Store
from app.stream.revisioner import streaming
from bench.common import Stack, median, write_result

ROOT = Path(__file__).resolve().parents[2]
CM, POD, LEASE, NODE = BY_KIND["ConfigMap"], BY_KIND["Pod"], BY_KIND["Lease"], BY_KIND["Node"]
MIX_NS = "mix"
RENEW_EVERY_S = 10.0  # agent/lease.py RENEW_EVERY
TARGET_RATIO = 0.8


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.audit.run", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("--rounds", type=int, default=6, help="pairs of off/on rounds")
    p.add_argument("--seconds", type=float, default=5.0, help="per round")
    p.add_argument("--writers", type=int, default=8)
    p.add_argument("--pods", type=int, default=200, help="pod lifecycles measured")
    p.add_argument("--nodes", type=int, default=10_000, help="hollow nodes' leases")
    p.add_argument("--renewals", type=int, default=3, help="renewals of every lease")
    p.add_argument("--mix-status", type=int, default=2,
                   help="status-only pod writes per lifecycle in the write mix")  # fmt: skip
    p.add_argument("--mix-renewals", type=int, default=3,
                   help="lease renewals of the node per lifecycle in the write mix")  # fmt: skip
    p.add_argument("--no-sealer", dest="sealer", action="store_false",
                   help="history on without the sealer running (splits out its cost)")  # fmt: skip
    p.add_argument("--no-revisioner", dest="revisioner", action="store_false",
                   help="measure throughput without the revisioner running (PostgreSQL alone;"
                        " the bench then runs the sealer itself in the on rounds)")  # fmt: skip
    return p.parse_args(argv)


def ctx(principal: str, request: str, reason: str | None = None) -> WriteContext:
    return WriteContext(principal=principal, groups=("system:authenticated",),
                        request_id=request, client="127.0.0.1", user_agent="bench/audit",
                        reason=reason)  # fmt: skip


def history_triggers(db: psycopg.Connection[Any], on: bool) -> None:
    """Enable (ALWAYS) or disable every history trigger on the state tables."""
    found = db.execute(
        "SELECT t.tgrelid::regclass::text, t.tgname FROM pg_trigger t"
        " WHERE t.tgname ~ '_history(_ins|_upd|_del|_truncate)?$' AND NOT t.tgisinternal"
    ).fetchall()
    with db.transaction():
        for table, trigger in found:
            action = "ENABLE ALWAYS" if on else "DISABLE"
            db.execute(f'ALTER TABLE {table} {action} TRIGGER "{trigger}"')


def relation_bytes(db: psycopg.Connection[Any]) -> int:
    """Heap, TOAST and indexes of every history partition and of the chain's links."""
    row = db.execute(
        "SELECT coalesce(sum(pg_total_relation_size(i.inhrelid)), 0)"
        " + pg_total_relation_size('qm_history_links') FROM pg_inherits i"
        " WHERE i.inhparent = 'qm_history'::regclass"
    ).fetchone()
    return int(row[0]) if row else 0


def process_cpu_s(pid: int | None) -> float:
    """CPU seconds used so far by one process (0 for none)."""
    if pid is None:
        return 0.0
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start_revisioner(stack: Stack) -> subprocess.Popen[bytes]:
    """The revisioner as the control plane runs it (``python -m app.stream``), leading once it
    streams; it also runs the sealer (ADR 0052)."""
    env = {**os.environ, "DATABASE_URL": stack.url}
    proc = subprocess.Popen([sys.executable, "-m", "app.stream"], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL)  # fmt: skip
    with psycopg.connect(stack.url, autocommit=True) as db:
        deadline = time.monotonic() + 60
        while not streaming(db):
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError("the revisioner did not start streaming")
            time.sleep(0.1)
    return proc


def server_cpu_s(postmaster: int | None) -> float:
    """CPU seconds used so far by the server: the postmaster, its live children, and (the
    postmaster's cutime and cstime) its children that exited and were reaped, such as the
    previous round's sealer connection or an autovacuum worker. 0 without an embedded
    server."""
    if postmaster is None:
        return 0.0
    tick, total = os.sysconf("SC_CLK_TCK"), 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == postmaster:
            total += int(fields[11]) + int(fields[12])
        elif int(entry) == postmaster:
            total += sum(int(f) for f in fields[11:15])
    return total / tick


# -- throughput ------------------------------------------------------------------------------
async def churn(store: Store, writer: int, seconds: float) -> int:
    """Create, update and delete ConfigMaps for ``seconds``; the writes done."""
    done, deadline = 0, time.monotonic() + seconds
    for i in itertools.count():
        if time.monotonic() >= deadline:
            return done
        name, c = f"w{writer}-{i}", ctx(f"user-{writer}", f"req-{writer}-{i}", "bench")
        obj: dict[str, Any] = {
            "metadata": {"namespace": "bench", "name": name, "labels": {"app": "bench"}},
            "spec": {"data": {"k": "v" * 200}},
        }
        stored = await store.create(CM, obj, ctx=c)
        obj["spec"] = {"data": {"k": "w" * 200}}
        obj["metadata"]["labels"] = {"app": "bench", "rev": "2"}
        await store.update(CM, obj, stored.row_version, ctx=c)
        await store.delete(CM, "bench", name, ctx=c)
        done += 3
    return done


Work = Callable[[Store, int, float], Awaitable[int]]


async def throughput(
    stack: Stack,
    args: argparse.Namespace,
    work: Work = churn,
    workload: str = "ConfigMap create, update (labels and data), delete; every write stored",
    count_history: bool = False,
) -> dict[str, Any]:
    """Interleaved off/on rounds of ``work`` by ``--writers`` writers. ``count_history``: also
    record, per on round, the history rows stored and the writes counted in the tally."""
    pool = await create_pool(stack.url, max_size=args.writers + 2)
    store = Store(pool)
    postmaster = stack.pg.pid if stack.pg is not None else None
    rounds: list[dict[str, Any]] = []
    revisioner = start_revisioner(stack) if args.revisioner else None
    rev_pid = revisioner.pid if revisioner is not None else None
    try:
        with psycopg.connect(stack.url, autocommit=True) as db:
            for r in range(args.rounds):
                for on in (False, True):
                    history_triggers(db, on)
                    stop = threading.Event()
                    sealer = Sealer(stack.url)
                    thread = threading.Thread(target=sealer.run, args=(stop,), daemon=True)
                    bench_seals = on and args.sealer and revisioner is None
                    if bench_seals:
                        thread.start()
                    h0 = history_marks(db) if count_history else None
                    t0, c0 = time.monotonic(), time.process_time()
                    s0, r0 = server_cpu_s(postmaster), process_cpu_s(rev_pid)
                    counts = await asyncio.gather(
                        *(work(store, w, args.seconds) for w in range(args.writers))
                    )
                    elapsed = time.monotonic() - t0
                    client_us = (time.process_time() - c0) * 1e6 / sum(counts)
                    server_us = (server_cpu_s(postmaster) - s0) * 1e6 / sum(counts)
                    # The revisioner is a client of the server like this one.
                    client_us += (process_cpu_s(rev_pid) - r0) * 1e6 / sum(counts)
                    stop.set()
                    if bench_seals:
                        thread.join(timeout=10)
                    rate = sum(counts) / elapsed
                    rounds.append({"round": r, "history": on, "writes_per_s": round(rate, 1),
                                   "server_cpu_us_per_write": round(server_us, 1),
                                   "client_cpu_us_per_write": round(client_us, 1),
                                   "sealer_lag_s": round(sealer.lag_s, 3)})  # fmt: skip
                    if h0 is not None:
                        h1 = history_marks(db)
                        rounds[-1]["writes"] = sum(counts)
                        rounds[-1]["history_rows_stored"] = h1[0] - h0[0]
                        rounds[-1]["history_writes_counted"] = h1[1] - h0[1]
                    print(f"round {r} history={'on ' if on else 'off'}: {rate:8.1f} writes/s,"
                          f" server {server_us:6.1f} us/write, client {client_us:6.1f} us/write",
                          flush=True)  # fmt: skip
            history_triggers(db, True)
            seal_all(db)
    finally:
        if revisioner is not None:
            revisioner.terminate()
            revisioner.wait(timeout=30)
        await store.close()
        await pool.close()
    ratios = [
        on["writes_per_s"] / off["writes_per_s"]
        for off, on in zip(rounds[::2], rounds[1::2], strict=True)
    ]
    # The same comparison in CPU (server and this client, per write): what the ratio would be
    # on a machine whose CPU is the limit and not shared with anything else.
    cpu = {
        on: median([x["server_cpu_us_per_write"] + x["client_cpu_us_per_write"]
                    for x in rounds if x["history"] is on])
        for on in (False, True)
    }  # fmt: skip
    return {
        "rounds": rounds,
        "ratio_per_round": [round(x, 3) for x in ratios],
        "ratio_median": round(median(ratios), 3),
        "cpu_us_per_write_median": {"off": round(cpu[False], 1), "on": round(cpu[True], 1)},
        "cpu_ratio": round(cpu[False] / cpu[True], 3) if cpu[True] else None,
        "target_ratio": TARGET_RATIO,
        "writers": args.writers,
        "seconds_per_round": args.seconds,
        "revisioner": args.revisioner,
        "workload": workload,
    }


def history_marks(db: psycopg.Connection[Any]) -> tuple[int, int]:
    """History rows so far (all committed: the writers are idle) and writes counted."""
    row = db.execute(
        "SELECT (SELECT count(*) FROM qm_history),"
        " (SELECT coalesce(sum(count), 0) FROM qm_history_tally)"
    ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


# -- throughput, the pods' write mix ---------------------------------------------------------
async def mix_setup(stack: Stack, args: argparse.Namespace) -> dict[int, dict[str, Any]]:
    """One node (ample room, Ready) and its lease per writer; each writer's state."""
    pool = await create_pool(stack.url, max_size=2)
    store, nodes = Store(pool), {}
    try:
        for w in range(args.writers):
            name = f"mix-n{w}"
            alloc = {"cpu": "64", "memory": "256Gi", "pods": "110"}
            node = await store.create(NODE, {
                "metadata": {"name": name}, "spec": {},
                "status": {"allocatable": alloc, "capacity": dict(alloc),
                           "conditions": [{"type": "Ready", "status": "True"}]},
            }, ctx=ctx(f"system:node:{name}", f"register-{name}"))  # fmt: skip
            lease = await store.create(LEASE, {
                "metadata": {"namespace": LEASE_NAMESPACE, "name": name},
                "spec": {"holderIdentity": name, "leaseDurationSeconds": 40,
                         "renewTime": "2026-12-02T00:00:00.000000Z"},
            }, ctx=ctx(f"system:node:{name}", f"lease-{name}"))  # fmt: skip
            nodes[w] = {"node": name, "node_uid": node.uid, "lease": lease.row_version}
    finally:
        await store.close()
        await pool.close()
    return nodes


def mix_work(args: argparse.Namespace, nodes: dict[int, dict[str, Any]]) -> Work:
    """A writer's loop over pod lifecycles on its own node (see the module docstring)."""
    stamp = itertools.count()

    async def lifecycle_loop(store: Store, writer: int, seconds: float) -> int:
        state, done = nodes[writer], 0
        node, deadline = state["node"], time.monotonic() + seconds
        kubelet_who, lease_ns = f"system:node:{node}", LEASE_NAMESPACE
        for i in itertools.count():
            if time.monotonic() >= deadline:
                return done
            name = f"{node}-{i}-{next(stamp)}"
            api = ctx(f"user-{writer}", f"req-{name}")
            kubelet = ctx(kubelet_who, f"sync-{name}")
            obj: dict[str, Any] = {
                "metadata": {"namespace": MIX_NS, "name": name, "labels": {"app": "web"}},
                "spec": {"containers": [{"name": "main", "image": "registry.local/web:1",
                                         "resources": {"requests": {"cpu": "100m",
                                                                    "memory": "64Mi"}}}],
                         "schedulerName": "default-scheduler"},
            }  # fmt: skip
            pod = await store.create(POD, obj, ctx=api)
            bind = Bind(pod_uid=pod.uid, namespace=MIX_NS, name=name,
                        row_version=pod.row_version, node_uid=state["node_uid"], node_name=node,
                        cpu_milli=100, memory_bytes=64 * 2**20, gpu=0,
                        batch=False)  # fmt: skip
            scheduler = ctx("system:kube-scheduler", f"cycle-{name}")
            async with store.pool.acquire() as conn:
                bound = await bind_many(conn, [bind], datetime.now(UTC), scheduler)
            if not bound.bound:
                raise RuntimeError(f"bind of {name} refused: {bound}")
            version = bound.versions[pod.uid]
            obj["spec"] = {**obj["spec"], "nodeName": node}
            waiting = {"name": "main", "ready": False, "restartCount": 0,
                       "state": {"waiting": {"reason": "ContainerCreating"}}}  # fmt: skip
            obj["status"] = {"phase": "Pending", "containerStatuses": [waiting]}
            version = (await store.update_status(POD, obj, version, ctx=kubelet)).row_version
            running = {"name": "main", "ready": False, "restartCount": 0,
                       "state": {"running": {"startedAt": "2026-12-02T00:00:00Z"}}}  # fmt: skip
            obj["status"] = {"phase": "Running", "podIP": "10.0.0.5",
                             "startTime": "2026-12-02T00:00:00Z",
                             "containerStatuses": [running]}  # fmt: skip
            version = (await store.update_status(POD, obj, version, ctx=kubelet)).row_version
            ready = {"type": "Ready", "status": "True",
                     "lastTransitionTime": "2026-12-02T00:00:01Z"}  # fmt: skip
            obj["status"] = {**obj["status"], "conditions": [ready],
                             "containerStatuses": [{**running, "ready": True}]}  # fmt: skip
            version = (await store.update_status(POD, obj, version, ctx=kubelet)).row_version
            done += 5  # create, bind, Pending, Running, Ready
            for k in range(args.mix_status):  # periodic: same phase and readiness
                probed = {**ready, "lastProbeTime": f"2026-12-02T00:00:{10 + k:02d}Z"}
                obj["status"] = {**obj["status"], "conditions": [probed]}
                version = (await store.update_status(POD, obj, version, ctx=kubelet)).row_version
                done += 1
            for _ in range(args.mix_renewals):
                renew = f"2026-12-02T00:00:{next(stamp) % 60:02d}.{writer:06d}Z"
                lease = {"metadata": {"namespace": lease_ns, "name": node},
                         "spec": {"holderIdentity": node, "leaseDurationSeconds": 40,
                                  "renewTime": renew}}  # fmt: skip
                stored = await store.update(LEASE, lease, state["lease"],
                                            ctx=ctx(kubelet_who, f"renew-{node}"))  # fmt: skip
                state["lease"] = stored.row_version
                done += 1
            marked = await store.delete(POD, MIX_NS, name, ctx=api)
            if marked is None:
                raise RuntimeError(f"{name} was removed instead of marked deleting")
            await store.delete(POD, MIX_NS, name, grace_seconds=0, expected_uid=pod.uid,
                               ctx=kubelet)  # fmt: skip
            done += 2  # the mark and the delete
        return done

    return lifecycle_loop


def mix_composition(args: argparse.Namespace) -> dict[str, Any]:
    stored = ["create (Store.create)", "bind (bind_many)", "status Pending (update_status)",
              "status Running", "status Ready", "mark deleting (Store.delete)",
              "delete, the node's confirmation (Store.delete grace 0)"]  # fmt: skip
    counted = [f"{args.mix_status} status-only pod writes (update_status, no promoted column)",
               f"{args.mix_renewals} lease renewals of the node (Store.update)"]  # fmt: skip
    per = len(stored) + args.mix_status + args.mix_renewals
    return {
        "writes_per_lifecycle": per,
        "stored_by_rule_per_lifecycle": len(stored),
        "counted_by_rule_per_lifecycle": args.mix_status + args.mix_renewals,
        "stored_writes": stored,
        "counted_writes": counted,
        "writes_per_s_counts": "every one of these writes, stored or counted, as one write",
    }


# -- bytes per pod lifecycle -----------------------------------------------------------------
async def lifecycles(stack: Stack, n: int) -> dict[str, Any]:
    pool = await create_pool(stack.url, max_size=4)
    store = Store(pool)
    with psycopg.connect(stack.url, autocommit=True) as db:
        seal_all(db)
        db.execute("VACUUM qm_history")
        size0 = relation_bytes(db)
        id0 = db.execute("SELECT coalesce(max(id), 0) FROM qm_history").fetchone()[0]  # type: ignore[index]
        try:
            for i in range(n):
                await one_lifecycle(store, db, f"p{i}")
        finally:
            await store.close()
            await pool.close()
        size1 = relation_bytes(db)
        rows = db.execute(
            "SELECT op, count(*), sum(pg_column_size(h.*)) FROM qm_history h"
            " WHERE id > %s AND table_name = 'pods' GROUP BY op ORDER BY op",
            (id0,),
        ).fetchall()
        seal_all(db)
        size2 = relation_bytes(db)
        db.execute("VACUUM qm_history")
        size3 = relation_bytes(db)
    count = sum(int(r[1]) for r in rows)
    row_bytes = sum(int(r[2]) for r in rows)
    return {
        "pods": n,
        "rows_per_lifecycle": round(count / n, 2),
        "row_bytes_per_lifecycle": round(row_bytes / n),
        "by_op": {r[0]: {"rows": int(r[1]), "bytes": int(r[2])} for r in rows},
        "disk_bytes_per_lifecycle_unsealed": round((size1 - size0) / n),
        "disk_bytes_per_lifecycle_sealed": round((size2 - size0) / n),
        "disk_bytes_per_lifecycle_sealed_vacuumed": round((size3 - size0) / n),
        "steps": "create, bind (spec.nodeName), Running, Ready, delete (mark, then remove)",
    }


async def one_lifecycle(store: Store, db: psycopg.Connection[Any], name: str) -> None:
    api, kubelet = ctx("alice", f"create-{name}"), ctx("system:node:n1", f"sync-{name}")
    obj: dict[str, Any] = {
        "metadata": {"namespace": "life", "name": name, "labels": {"app": "web"}},
        "spec": {"containers": [{"name": "main", "image": "registry.local/web:1",
                                 "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}],
                 "schedulerName": "default-scheduler"},
    }  # fmt: skip
    stored = await store.create(POD, obj, ctx=api)
    obj["spec"] = {**obj["spec"], "nodeName": "n1"}
    scheduler = ctx("system:kube-scheduler", f"cycle-{name}", "bind to n1")
    stored = await store.update(POD, obj, stored.row_version, ctx=scheduler)
    obj["status"] = {"phase": "Running", "podIP": "10.0.0.5", "startTime": "2026-12-02T00:00:00Z"}
    stored = await store.update_status(POD, obj, stored.row_version, ctx=kubelet)
    obj["status"] = {**obj["status"], "conditions": [{"type": "Ready", "status": "True"}]}
    stored = await store.update_status(POD, obj, stored.row_version, ctx=kubelet)
    left = await store.delete(POD, "life", name, grace_seconds=0, ctx=api)
    if left is not None:  # the node confirms the stop: the row goes
        with db.transaction():
            db.execute("SELECT set_config('qm.context', %s, true)", (kubelet.text(),))
            db.execute("DELETE FROM pods WHERE namespace = 'life' AND name = %s", (name,))


# -- lease renewals --------------------------------------------------------------------------
async def renewals(stack: Stack, args: argparse.Namespace) -> dict[str, Any]:
    n, ns = args.nodes, "kube-node-lease"
    pool = await create_pool(stack.url, max_size=args.writers + 2)
    with psycopg.connect(stack.url, autocommit=True) as db:
        db.execute(
            "INSERT INTO leases (uid, namespace, name, spec) SELECT gen_random_uuid(), %s,"
            " 'node-' || i, jsonb_build_object('holderIdentity', 'node-' || i,"
            " 'leaseDurationSeconds', 40, 'renewTime', '2026-12-02T00:00:00.000000Z')"
            " FROM generate_series(1, %s) AS i",
            (ns, n),
        )
        seal_all(db)
        db.execute("VACUUM qm_history")
        size0 = relation_bytes(db)
        id0 = db.execute("SELECT coalesce(max(id), 0) FROM qm_history").fetchone()[0]  # type: ignore[index]
        versions: dict[str, int] = {
            str(r[0]): int(r[1])
            for r in db.execute("SELECT name, row_version FROM leases WHERE namespace = %s", (ns,))
        }
        t0 = time.monotonic()
        queue = [f"node-{i}" for _ in range(args.renewals) for i in range(1, n + 1)]
        await renew_all(pool, queue, versions, args.writers)
        elapsed = time.monotonic() - t0
        gained = db.execute(
            "SELECT count(*) FROM qm_history WHERE id > %s AND table_name = 'leases'", (id0,)
        ).fetchone()[0]  # type: ignore[index]
        tally = db.execute(
            "SELECT count(*), coalesce(sum(count), 0) FROM qm_history_tally"
            " WHERE table_name = 'leases'"
        ).fetchone()
        tally_bytes = db.execute("SELECT pg_total_relation_size('qm_history_tally')").fetchone()
        size1 = relation_bytes(db)
        db.execute("UPDATE qm_history_tally SET hour = hour - interval '1 hour'")
        seal_all(db)
        summaries = db.execute(
            "SELECT count(*), coalesce(sum(summary_count), 0),"
            " coalesce(sum(pg_column_size(h.*)), 0) FROM qm_history h"
            " WHERE id > %s AND op = 'summary' AND table_name = 'leases'",
            (id0,),
        ).fetchone()
        # What one renewal would cost stored: a holder change is a stored update of the same
        # shape (the changed spec, generation and row version).
        id1 = db.execute("SELECT max(id) FROM qm_history").fetchone()[0]  # type: ignore[index]
        db.execute(
            'UPDATE leases SET spec = spec || \'{"holderIdentity": "other"}\''
            " WHERE namespace = %s"
            " AND name IN (SELECT 'node-' || i FROM generate_series(1, 100) AS i)",
            (ns,),
        )
        stored_row = db.execute(
            "SELECT avg(pg_column_size(h.*)) FROM qm_history h WHERE id > %s", (id1,)
        ).fetchone()[0]  # type: ignore[index]
    await pool.close()
    assert tally is not None and summaries is not None and tally_bytes is not None
    per_hour = n * 3600 / RENEW_EVERY_S
    return {
        "nodes": n,
        "renewals": len(queue),
        "renewals_per_s": round(len(queue) / elapsed, 1),
        "history_rows_gained_by_renewals": int(gained),
        "history_disk_bytes_gained_before_fold": size1 - size0,
        "tally_rows": int(tally[0]),
        "tally_counted": int(tally[1]),
        "tally_table_bytes": int(tally_bytes[0]),
        "summary_rows_after_fold": int(summaries[0]),
        "summary_counted": int(summaries[1]),
        "summary_row_bytes": int(summaries[2]),
        "renew_every_s": RENEW_EVERY_S,
        "projected_renewals_per_hour": per_hour,
        "projected_history_rows_per_hour": int(summaries[0]),
        "projected_history_bytes_per_hour": int(summaries[2]),
        "stored_lease_update_row_bytes": round(float(stored_row or 0)),
        "projected_bytes_per_hour_if_stored": round(per_hour * float(stored_row or 0)),
    }


async def renew_all(
    pool: asyncpg.Pool, queue: list[str], versions: dict[str, int], writers: int
) -> None:
    """Each writer renews its share of the queue with the store's conditional update shape."""
    store = Store(pool)
    stamp = itertools.count()

    async def writer(w: int) -> None:
        for name in queue[w::writers]:
            renew = f"2026-12-02T00:00:{next(stamp) % 60:02d}.{w:06d}Z"
            obj = {
                "metadata": {"namespace": "kube-node-lease", "name": name},
                "spec": {"holderIdentity": name, "leaseDurationSeconds": 40, "renewTime": renew},
            }
            node = ctx(f"system:node:{name}", f"renew-{name}")
            stored = await store.update(LEASE, obj, versions[name], ctx=node)
            versions[name] = stored.row_version

    try:
        await asyncio.gather(*(writer(w) for w in range(writers)))
    finally:
        await store.close()


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    stack = Stack()
    try:
        with psycopg.connect(stack.url, autocommit=True) as db:
            for ns in ("bench", "life", "kube-node-lease", MIX_NS, LEASE_NAMESPACE):
                db.execute("INSERT INTO namespaces (uid, name) VALUES (gen_random_uuid(), %s)"
                           " ON CONFLICT DO NOTHING", (ns,))  # fmt: skip
        result: dict[str, Any] = {"benchmark": "audit"}
        # Sizes first, while the history holds no dead row versions whose space they would reuse.
        result["pod_lifecycle"] = await lifecycles(stack, args.pods)
        result["lease_renewals"] = await renewals(stack, args)
        result["throughput"] = await throughput(stack, args)
        nodes = await mix_setup(stack, args)
        mix = await throughput(
            stack, args, mix_work(args, nodes),
            "pods' write mix: each writer takes pods through their lifecycle on its node and "
            "renews the node's lease (see composition)",
            count_history=True,
        )  # fmt: skip
        on = [x for x in mix["rounds"] if x["history"]]
        writes = sum(x["writes"] for x in on)
        mix["composition"] = mix_composition(args)
        for key in ("history_rows_stored", "history_writes_counted"):
            total = sum(x[key] for x in on)
            mix[f"{key}_per_write_on"] = round(total / writes, 3) if writes else None
        result["throughput_pod_mix"] = mix
        return result
    finally:
        stack.close()


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    result = asyncio.run(main_async(args))
    result["args"] = vars(args)
    path = write_result("audit", result)
    shown = ("throughput", "throughput_pod_mix", "pod_lifecycle")
    print(json.dumps({k: result[k] for k in shown}, indent=2))
    print(json.dumps(result["lease_renewals"], indent=2))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
