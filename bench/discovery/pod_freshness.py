"""Endpoint freshness end to end: a pod's readiness change until every subscriber holds it.

``bench.discovery.run``'s latency step starts from an EndpointSlice UPDATE; this step (its
``freshness``, called last by ``bench.discovery.run``) starts where an agent's status write
does, so the EndpointSlice controller's hop is in it: the dispatcher tailing the revision log,
the Celery task, the reconcile and its at-most-one-write-a-second limit per slice.

Setup, on the benchmark's database, revisioner and discovery replica: the earlier steps'
hand-made slices and services go (the controller would take those over); a Redis
(``EmbeddedRedis``), one Celery worker running the Service controller and one dispatcher;
``services`` Services with a selector, each picking ``per_service`` Running pods with a podIP
and ``Ready=True`` on ``NODES`` nodes in three zones, all by SQL; the controller writes the
slices. Then, per subscriber count, subscribers of ``bench.discovery.pod_subscribers``.

A change is one pod's ``status`` UPDATE flipping its Ready condition (autocommit; its commit is
when the statement returns). Per run: ``changes`` changes to pods of distinct slices, 1-2 s
apart (each slice quiet: the controller writes at once), then ``bursts`` bursts of ``BURST``
changes to pods of one slice ``BURST_GAP`` s apart (the second and later hit a slice written
less than 1 s before: the rate limit's cost). Per change, from the revision log: when the pod's
entry and the first slice entry showing the new readiness were appended (``committed_at``) and
the slice write's ``last-write`` stamp (the reconcile's ``now``); per subscriber, when it
applied the message showing it. ``committed_at`` is the revisioner's append transaction's
``now()``: an entry's arrival in the log, a little after the write it records committed (the
slice's own commit is not recorded anywhere). Times on one clock: wall-clock stamps are moved
onto ``time.monotonic`` by one offset read at the run's start (its drift by the run's end is
reported).
"""

from __future__ import annotations

import asyncio
import json
import random
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

from app.core.controllers.endpointslice import LAST_WRITE
from app.core.traffic.protocol import endpoint_key
from app.devstack.redis import EmbeddedRedis
from bench.common import ROOT, median, percentile
from bench.controllers.run import start_worker
from bench.discovery.dataset import NS as DATASET_NS
from bench.discovery.harness import Worker, Workers
from bench.scheduler.run import Procs, wait_for

NS = "freshness"
ZONES = ("zone-a", "zone-b", "zone-c")
NODES = 6
PORT = 8080
BURST, BURST_GAP = 3, 0.3
CLASSES = ("spaced", "burst_first", "burst_later")
# pod commit -> slice in the log; its parts: -> pod in the log, -> reconcile start, -> slice in
# the log; then slice in the log -> the last subscriber.
HOPS = ("pod_to_slice", "pod_log", "log_to_reconcile", "reconcile_to_slice_log", "slice_to_all")
NAN = float("nan")


@dataclass
class Pod:
    service: str
    name: str
    uid: str
    ip: str
    ready: bool = True

    def status(self, ready: bool) -> str:
        cond = {"type": "Ready", "status": "True" if ready else "False"}
        return json.dumps({"phase": "Running", "podIP": self.ip, "conditions": [cond]})


class Cluster:
    """The step's nodes, Services and pods (by service index), written by SQL."""

    def __init__(self, services: int, per_service: int) -> None:
        self.services = [f"web-{s:04d}" for s in range(services)]
        self.pods = [
            [
                Pod(
                    svc,
                    f"{svc}-{e:02d}",
                    str(uuid.uuid4()),
                    f"10.90.{(s * per_service + e) // 250}.{(s * per_service + e) % 250 + 1}",
                )
                for e in range(per_service)
            ]
            for s, svc in enumerate(self.services)
        ]

    def insert(self, db: psycopg.Connection[Any]) -> None:
        with db.transaction():
            for i in range(NODES):
                labels = {"topology.kubernetes.io/zone": ZONES[i % len(ZONES)]}
                db.execute(
                    "INSERT INTO nodes (uid, namespace, name, labels) VALUES (%s, '', %s, %s)",
                    (uuid.uuid4(), f"fresh-{i}", json.dumps(labels)),
                )
            for svc, pods in zip(self.services, self.pods, strict=True):
                spec = {
                    "type": "ClusterIP",
                    "selector": {"app": svc},
                    "ports": [{"name": "http", "port": 80, "targetPort": PORT}],
                }
                db.execute(
                    "INSERT INTO services (uid, namespace, name, spec) VALUES (%s, %s, %s, %s)",
                    (uuid.uuid4(), NS, svc, json.dumps(spec)),
                )
                for j, p in enumerate(pods):
                    spec = {
                        "nodeName": f"fresh-{j % NODES}",
                        "containers": [{"name": "c", "image": "busybox"}],
                    }
                    row = (p.uid, NS, p.name, json.dumps({"app": svc}), json.dumps(spec),
                           p.status(True))  # fmt: skip
                    db.execute(
                        "INSERT INTO pods (uid, namespace, name, labels, spec, status)"
                        " VALUES (%s, %s, %s, %s, %s, %s)",
                        row,
                    )

    def settled(self, db: psycopg.Connection[Any], per_service: int) -> bool:
        """Every Service has one slice holding all its pods."""
        row = db.execute(
            "SELECT count(*) FROM endpointslices WHERE namespace = %s"
            " AND jsonb_array_length(spec->'endpoints') = %s",
            (NS, per_service),
        ).fetchone()
        return row is not None and row[0] == len(self.services)


class Controllers:
    """Redis, one Celery worker running the Service controller, and one dispatcher."""

    def __init__(self, procs: Procs, env: dict[str, str], tmp: Path, logdir: Path) -> None:
        self.procs = procs
        self.redis = EmbeddedRedis(tmp / "redis")
        broker = self.redis.start()
        self.env = {
            **env,
            "QM_BROKER_URL": broker,
            "QM_CONTROLLERS": "Service",
            "PYTHONUNBUFFERED": "1",
        }
        self.worker = start_worker(procs, self.env, logdir / "celery.log", 2)
        self.dispatcher = procs.start(
            ["-m", "workers.dispatch"], self.env, logdir / "dispatcher.log"
        )

    def close(self) -> None:
        self.procs.stop(self.dispatcher)
        self.procs.stop(self.worker)
        self.redis.stop()


async def start_workers(n: int, log: Path) -> Workers:
    procs = []
    for i in range(n):
        err = open(log.with_name(f"{log.name}-{i}.log"), "ab")  # noqa: SIM115
        procs.append(
            await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "bench.discovery.pod_subscribers",
                cwd=ROOT,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=err,
                limit=2**27,
            )
        )
        err.close()
    return Workers([Worker(p) for p in procs])


@dataclass
class Change:
    ident: int
    pod: Pod
    ready: bool
    cls: str
    commit: float = 0.0  # time.monotonic() when the UPDATE returned
    row_version: int = 0


def plan(cluster: Cluster, rng: random.Random, changes: int, bursts: int) -> list[Change]:
    """Pods of distinct slices, one per spaced change and ``BURST`` per burst."""
    picked = rng.sample(range(len(cluster.services)), changes + bursts)
    out: list[Change] = []
    for n, s in enumerate(picked):
        pods = rng.sample(cluster.pods[s], 1 if n < changes else BURST)
        for j, pod in enumerate(pods):
            cls = "spaced" if n < changes else ("burst_first" if j == 0 else "burst_later")
            out.append(Change(len(out), pod, not pod.ready, cls))
    return out


async def flip(db: psycopg.AsyncConnection[Any], c: Change) -> None:
    cur = await db.execute(
        "UPDATE pods SET status = %s WHERE uid = %s RETURNING row_version",
        (c.pod.status(c.ready), c.pod.uid),
    )
    c.commit = time.monotonic()
    row = await cur.fetchone()
    assert row is not None
    c.row_version, c.pod.ready = int(row[0]), c.ready


async def watch(workers: Workers, changes: list[Change]) -> None:
    keys = {endpoint_key(NS, c.pod.service, c.pod.name): [c.ident, c.ready] for c in changes}
    for _ in range(100):
        parts = await workers.all("watch", keys=keys)
        if not any(p["lacking"] or p["already"] for p in parts):
            return
        await asyncio.sleep(0.1)
    raise RuntimeError(f"subscribers lack the watched endpoints or already show them: {parts}")


async def hops(db: psycopg.AsyncConnection[Any], c: Change, offset: float) -> dict[str, float]:
    """When the pod's entry and the first slice entry showing its change reached the revision
    log, and the reconcile that wrote it started (``time.monotonic`` seconds)."""
    cur = await db.execute(
        "SELECT revision, committed_at FROM qm_revision_log WHERE uid = %s AND row_version = %s",
        (c.pod.uid, c.row_version),
    )
    pod_row = await cur.fetchone()
    assert pod_row is not None, f"no revision log entry for {c.pod.name}"
    cur = await db.execute(
        "SELECT revision, committed_at, object::jsonb FROM qm_revision_log"
        " WHERE kind = 'EndpointSlice' AND namespace = %s AND revision > %s"
        " AND object->'metadata'->'labels'->>'kubernetes.io/service-name' = %s"
        " ORDER BY revision",
        (NS, pod_row[0], c.pod.service),
    )
    for revision, at, obj in await cur.fetchall():
        for ep in obj.get("endpoints") or []:
            if ep["targetRef"]["name"] == c.pod.name and ep["conditions"]["ready"] is c.ready:
                stamp = float(obj["metadata"]["annotations"][LAST_WRITE])
                return {
                    "pod_logged": pod_row[1].timestamp() - offset,
                    "reconcile": stamp - offset,
                    "slice_logged": at.timestamp() - offset,
                    "slice_revision": revision,
                }
    raise RuntimeError(f"no slice entry shows {c.pod.name} ready={c.ready}")


def ms(x: float) -> float:
    return round(x * 1000, 1)


def summarise(
    changes: list[Change], got: dict[int, dict[str, float]], notes: dict[int, list[float]]
) -> dict[str, Any]:
    """Per class: end to end over subscribers x changes, and the hops over changes."""
    out: dict[str, Any] = {}
    for cls in CLASSES:
        sel = [c for c in changes if c.cls == cls]
        if not sel:
            continue
        total = [t - c.commit for c in sel for t in notes[c.ident]]
        fan = [t - got[c.ident]["slice_logged"] for c in sel for t in notes[c.ident]]
        last = [max(notes[c.ident], default=NAN) - c.commit for c in sel]
        hop = [_hop(c, got[c.ident], notes[c.ident]) for c in sel]
        h = {k: [x[k] for x in hop] for k in HOPS}
        out[cls] = {
            "changes": len(sel),
            "observations": len(total),
            "p50_ms": ms(percentile(total, 50)),
            "p99_ms": ms(percentile(total, 99)),
            "max_ms": ms(max(total, default=NAN)),
            "all_hold_it_p50_ms": ms(median(last)),
            "all_hold_it_max_ms": ms(max(last)),
            "slice_to_subscriber_p50_ms": ms(percentile(fan, 50)),
            "slice_to_subscriber_p99_ms": ms(percentile(fan, 99)),
            **{f"{k}_p50_ms": ms(median(v)) for k, v in h.items()},
            **{f"{k}_max_ms": ms(max(v)) for k, v in h.items()},
        }
    return out


def _hop(c: Change, g: dict[str, float], seen: list[float]) -> dict[str, float]:
    return {
        "pod_to_slice": g["slice_logged"] - c.commit,
        "pod_log": g["pod_logged"] - c.commit,
        "log_to_reconcile": g["reconcile"] - g["pod_logged"],
        "reconcile_to_slice_log": g["slice_logged"] - g["reconcile"],
        "slice_to_all": max(seen, default=NAN) - g["slice_logged"],
    }


async def run_once(
    cluster: Cluster,
    db: psycopg.AsyncConnection[Any],
    workers: Workers,
    rng: random.Random,
    changes: int,
    bursts: int,
) -> dict[str, Any]:
    todo = plan(cluster, rng, changes, bursts)
    await watch(workers, todo)
    offset = time.time() - time.monotonic()
    for i, c in enumerate(todo):
        await flip(db, c)
        same = i + 1 < len(todo) and todo[i + 1].pod.service == c.pod.service
        await asyncio.sleep(BURST_GAP if same else rng.uniform(1.0, 2.0))
    done = await workers.all("seen", timeout=60)
    notes: dict[int, list[float]] = {c.ident: [] for c in todo}
    versions: dict[int, set[int]] = {c.ident: set() for c in todo}
    for part in await workers.all("collect"):
        for ident, t, version in part["notes"]:
            notes[ident].append(t)
            versions[ident].add(version)
    drift = time.time() - time.monotonic() - offset
    got = {c.ident: await hops(db, c, offset) for c in todo}
    return {
        "all_current": all(d["ok"] for d in done),
        "missing": sum(d["missing"] for d in done),
        "clock_offset_drift_ms": ms(drift),
        "first_version_is_slice_revision": sum(
            min(versions[c.ident]) == got[c.ident]["slice_revision"] for c in todo
        ),
        "changes": len(todo),
        **summarise(todo, got, notes),
    }


async def measure(
    url: str,
    tmp: Path,
    procs: Procs,
    logdir: Path,
    port: int,
    counts: list[int],
    args: Any,
    out: dict[str, Any],
) -> None:
    """The step: fills ``out`` as it goes (so a failure keeps what was measured)."""
    rng = random.Random(args.seed)
    cluster = Cluster(args.services, args.per_service)
    out.update(
        {
            "namespace": NS,
            "services": args.services,
            "pods_per_service": args.per_service,
            "nodes": NODES,
            "spaced_changes_per_run": args.fresh_changes,
            "bursts_per_run": args.fresh_bursts,
            "burst_changes": BURST,
            "burst_gap_s": BURST_GAP,
            "runs": args.runs,
            "celery_concurrency": 2,
            "by_subscribers": {},
        }
    )
    env = {"DATABASE_URL": url, "QM_STREAM_DATABASE_URL": url}
    with psycopg.connect(url, autocommit=True) as sync_db:
        with sync_db.transaction():  # the earlier steps' hand-made slices: not the controller's
            sync_db.execute("DELETE FROM endpointslices WHERE namespace = %s", (DATASET_NS,))
            sync_db.execute("DELETE FROM services WHERE namespace = %s", (DATASET_NS,))
        cluster.insert(sync_db)
        t0 = time.monotonic()
        ctl = Controllers(procs, env, tmp, logdir)
        try:
            wait_for(
                "the controller's slices",
                lambda: cluster.settled(sync_db, args.per_service),
                180,
                [ctl.worker, ctl.dispatcher],
            )
            out["slices_written_after_start_s"] = round(time.monotonic() - t0, 2)
            db = await psycopg.AsyncConnection.connect(url, autocommit=True)
            try:
                for count in counts:
                    entry: dict[str, Any] = {"runs": []}
                    out["by_subscribers"][str(count)] = entry
                    await _count(cluster, db, port, count, rng, args, logdir, entry)
            finally:
                await db.close()
        finally:
            ctl.close()


async def _count(
    cluster: Cluster,
    db: psycopg.AsyncConnection[Any],
    port: int,
    count: int,
    rng: random.Random,
    args: Any,
    logdir: Path,
    entry: dict[str, Any],
) -> None:
    workers = await start_workers(2 if count <= 2000 else 4, logdir / f"fresh-subs-{count}")
    try:
        entry["connect_s"] = round(await workers.connect(port, count, f"f{count}"), 2)
        print(f"freshness: {count} subscribers connected in {entry['connect_s']}s", flush=True)
        for r in range(args.runs):
            await asyncio.sleep(2.0)  # every slice cool again
            x = await run_once(cluster, db, workers, rng, args.fresh_changes, args.fresh_bursts)
            entry["runs"].append(x)
            line = ", ".join(
                f"{cls} p50 {x[cls]['p50_ms']} p99 {x[cls]['p99_ms']} max {x[cls]['max_ms']} ms"
                for cls in CLASSES
                if cls in x
            )
            print(f"  freshness run {r}: {line}; all current {x['all_current']}", flush=True)
        first = entry["runs"][0]
        entry["median"] = {
            cls: {k: median([run[cls][k] for run in entry["runs"]]) for k in first[cls]}
            for cls in CLASSES
            if cls in first
        }
    finally:
        await workers.close()


def table(fresh: dict[str, Any] | None) -> None:
    if not fresh:
        return
    print(
        "\npod Ready flip -> every subscriber holds it, ms (medians of runs; seed bar p99 < 5000)"
    )
    print(
        "  subs class        p50    p99    max | pod->slice p50/max (pod log, to reconcile,"
        " to slice log) | slice->all p50/max"
    )
    for count, e in fresh["by_subscribers"].items():
        for cls, m in (e.get("median") or {}).items():
            print(
                f"{count:>6} {cls:11} {m['p50_ms']:>6} {m['p99_ms']:>6} {m['max_ms']:>6} | "
                f"{m['pod_to_slice_p50_ms']}/{m['pod_to_slice_max_ms']} ({m['pod_log_p50_ms']},"
                f" {m['log_to_reconcile_p50_ms']}, {m['reconcile_to_slice_log_p50_ms']}) | "
                f"{m['slice_to_all_p50_ms']}/{m['slice_to_all_max_ms']}"
            )
