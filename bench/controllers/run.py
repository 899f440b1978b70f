"""Controller benchmarks: how fast the Celery controllers turn declared state into pods.

``python -m bench.controllers.run --profile deployment``
    A Deployment of ``--replicas`` (1,000) created through the REST API: seconds from its
    create to the ReplicaSet existing, to every pod existing, and (with the scheduler and
    ``--nodes`` nodes running) to every pod bound. One Celery worker process, the dispatcher,
    the revisioner (in the API server) and the scheduler share the machine with PostgreSQL.

``python -m bench.controllers.run --profile tasks``
    Reconcile tasks per second of ONE worker process (``--concurrency 1``): ``--keys``
    ReplicaSets of 3 replicas written in SQL, every key enqueued at once. The first pass creates
    3 pods per key and writes its status (work); the second pass finds nothing to do (what a
    resync costs). The dispatcher is not running, so the keys enqueued are exactly the tasks.

Each profile runs ``--runs`` times (default 3; each run with objects of its own) and reports
medians; results go to ``bench/results/controllers-<profile>-<stamp>.json`` with the
machine description.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import psycopg
import redis

from bench.common import ROOT, Stack, machine, median, write_result
from bench.scheduler.run import ZONES, Procs
from bench.scheduler.run import postgres_cpu_seconds as cpu_seconds  # with its children

NS = "bench"


def _env(url: str, broker: str) -> dict[str, str]:
    return {
        "DATABASE_URL": url,
        "QM_STREAM_DATABASE_URL": url,
        "QM_BROKER_URL": broker,
        "QM_RESYNC_SECONDS": "3600",  # no resync during a measurement
    }


def start_worker(
    procs: Procs, env: dict[str, str], log: Path, concurrency: int, pool: str = "prefork"
) -> Any:
    """A Celery worker of the controllers (the benchmarks' own, without gossip or mingle)."""
    return procs.start(
        [
            "-m",
            "celery",
            "-A",
            "workers.app",
            "worker",
            "--loglevel=WARNING",
            f"--concurrency={concurrency}",
            f"--pool={pool}",
            "--without-gossip",
            "--without-mingle",
        ],
        env,
        log,
    )


def _nodes(db: psycopg.Connection[Any], count: int) -> None:
    status = json.dumps(
        {
            "allocatable": {"cpu": "32", "memory": "128Gi", "pods": "110"},
            "capacity": {"cpu": "32", "memory": "128Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True"}],
        }
    )
    with (
        db.transaction(),
        db.cursor() as cur,
        cur.copy("COPY nodes (uid, name, labels, spec, status) FROM STDIN") as cp,
    ):
        for i in range(count):
            name = f"node-{i:05d}"
            labels = {"topology.kubernetes.io/zone": ZONES[i % 3], "kubernetes.io/hostname": name}
            cp.write_row((uuid.uuid4(), name, json.dumps(labels), "{}", status))


def _count(db: psycopg.Connection[Any], sql: str, *params: Any) -> int:
    row = db.execute(sql, params).fetchone()
    return int(row[0]) if row else 0


# -- deployment ---------------------------------------------------------------------------------
def deployment_run(
    stack: Stack, args: argparse.Namespace, broker: str, n: int, procs: Procs, logdir: Path
) -> dict[str, Any]:
    name = f"web-{n}-{secrets.token_hex(2)}"
    client = httpx.Client(
        base_url=stack.api_url, headers={"Authorization": f"Bearer {stack.token}"}, timeout=30
    )
    manifest = {
        "apiVersion": "quaymaster.io/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "replicas": args.replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "containers": [
                        {
                            "name": "app",
                            "image": "registry.local/web:1",
                            "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}},
                        }
                    ]
                },
            },
        },
    }
    db = psycopg.connect(stack.url, autocommit=True)
    worker_pid = procs.live[0].pid
    cpu0 = cpu_seconds(worker_pid)
    t0 = time.monotonic()
    r = client.post(f"/apis/quaymaster.io/v1/namespaces/{NS}/deployments", json=manifest)
    r.raise_for_status()
    dep_uid = r.json()["metadata"]["uid"]
    marks: dict[str, float] = {}
    samples: list[tuple[float, int, int]] = []
    deadline = t0 + args.timeout
    while time.monotonic() < deadline:
        rs = db.execute(
            "SELECT uid FROM replicasets WHERE owner_references @> %s::jsonb",
            (json.dumps([{"uid": dep_uid}]),),
        ).fetchone()
        now = time.monotonic() - t0
        if rs is None:
            time.sleep(0.02)
            continue
        marks.setdefault("replicaset_s", now)
        pattern = json.dumps([{"uid": str(rs[0])}])
        created = _count(
            db, "SELECT count(*) FROM pods WHERE owner_references @> %s::jsonb", pattern
        )
        bound = _count(
            db,
            "SELECT count(*) FROM pods WHERE owner_references @> %s::jsonb"
            " AND node_name IS NOT NULL",
            pattern,
        )
        samples.append((round(now, 3), created, bound))
        if created >= args.replicas:
            marks.setdefault("all_created_s", now)
        if bound >= args.replicas:
            marks.setdefault("all_bound_s", now)
        if "all_created_s" in marks and ("all_bound_s" in marks or not args.nodes):
            break
        time.sleep(0.05)
    cpu = cpu_seconds(worker_pid) - cpu0
    db.close()
    client.close()
    return {
        "replicaset_s": round(marks.get("replicaset_s", float("nan")), 3),
        "all_created_s": round(marks.get("all_created_s", float("nan")), 3),
        "all_bound_s": round(marks.get("all_bound_s", float("nan")), 3) if args.nodes else None,
        "worker_cpu_s": round(cpu, 2),
        "ok": "all_created_s" in marks,
        "samples": samples[:: max(1, len(samples) // 60)],
    }


# -- tasks per second ---------------------------------------------------------------------------
def _replicasets(db: psycopg.Connection[Any], prefix: str, count: int) -> list[str]:
    names = []
    with (
        db.transaction(),
        db.cursor() as cur,
        cur.copy("COPY replicasets (uid, namespace, name, labels, spec) FROM STDIN") as cp,
    ):
        for i in range(count):
            name = f"{prefix}-{i:05d}"
            spec = {
                "replicas": 3,
                "selector": {"matchLabels": {"app": name}},
                "template": {
                    "metadata": {"labels": {"app": name}},
                    "spec": {"containers": [{"name": "c", "image": "busybox"}]},
                },
            }
            cp.write_row((uuid.uuid4(), NS, name, json.dumps({"app": name}), json.dumps(spec)))
            names.append(name)
    return names


def _drain(r: redis.Redis, queues: list[str], timeout: float) -> None:
    """Until no task is queued, pending or held unacknowledged by the worker."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        queued = sum(int(r.llen(q)) for q in queues)  # type: ignore[arg-type]
        pending = next(iter(r.scan_iter("qm:pending:*", count=10_000)), None)
        unacked = int(r.hlen("unacked"))  # type: ignore[arg-type]
        if queued == 0 and pending is None and unacked == 0:
            return
        time.sleep(0.1)  # a lighter touch on the broker the worker is using
    raise RuntimeError("the worker did not drain its queue in time")


def tasks_run(
    stack: Stack, args: argparse.Namespace, broker: str, n: int, env: dict[str, str]
) -> dict[str, Any]:
    from workers.app import QUEUES

    db = psycopg.connect(stack.url, autocommit=True)
    r = redis.Redis.from_url(broker)
    names = _replicasets(db, f"rs{n}", args.keys)
    code = (
        "import sys\nfrom workers.tasks import enqueue\n"
        f"for name in sys.stdin.read().split():\n    enqueue('ReplicaSet', {NS!r}, name)\n"
    )
    out: dict[str, Any] = {}
    for label in ("first_pass", "steady_pass"):
        t0 = time.monotonic()
        subprocess.run(
            [sys.executable, "-c", code],
            input="\n".join(names).encode(),
            cwd=ROOT,
            env={**os.environ, **env},
            check=True,
        )
        enqueued = time.monotonic() - t0
        _drain(r, [f"reconcile-{i}" for i in range(QUEUES)], args.timeout)
        took = time.monotonic() - t0
        out[label] = {
            "tasks": len(names),
            "seconds": round(took, 3),
            "tasks_per_s": round(len(names) / took, 1),
            "enqueue_s": round(enqueued, 3),
        }
    pods = _count(db, "SELECT count(*) FROM pods WHERE name LIKE %s", f"rs{n}-%")
    out["pods_created"] = pods
    out["ok"] = pods == 3 * args.keys
    db.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--profile", choices=("deployment", "tasks"), default="deployment")
    ap.add_argument("--replicas", type=int, default=1000)
    ap.add_argument("--nodes", type=int, default=1000, help="deployment: 0 runs no scheduler")
    ap.add_argument("--keys", type=int, default=2000, help="tasks: ReplicaSets to reconcile")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--pool", default="prefork", help="the Celery worker's pool (prefork)")
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    from app.devstack.redis import EmbeddedRedis

    stack = Stack()
    procs = Procs()
    logdir = Path(stack.tmp) / "logs"
    logdir.mkdir(parents=True, exist_ok=True)
    redis_server = EmbeddedRedis(Path(stack.tmp) / "redis")
    broker = redis_server.start()
    runs: list[dict[str, Any]] = []
    try:
        env = _env(stack.url, broker)
        with psycopg.connect(stack.url, autocommit=True) as db:
            db.execute(
                "INSERT INTO namespaces (uid, namespace, name, spec, status) VALUES"
                " (gen_random_uuid(), '', %s, '{}', '{\"phase\": \"Active\"}')",
                (NS,),
            )
            if args.profile == "deployment" and args.nodes:
                _nodes(db, args.nodes)
        start_worker(procs, env, logdir / "worker.log", 1, args.pool)
        if args.profile == "deployment":
            os.environ.update(env)
            stack.start_api()
            procs.start(["-m", "workers.dispatch"], env, logdir / "dispatch.log")
            if args.nodes:
                procs.start(
                    ["-m", "app.scheduler", "--no-leader-elect"], env, logdir / "scheduler.log"
                )
            time.sleep(5.0)  # everything listening
        else:
            # The revisioner alone (no API server, no dispatcher): the keys enqueued are the tasks.
            procs.start(["-m", "app.stream"], env, logdir / "revisioner.log")
        for n in range(args.runs):
            if args.profile == "deployment":
                run = deployment_run(stack, args, broker, n, procs, logdir)
                print(
                    f"run {n}: rs {run['replicaset_s']}s, all created {run['all_created_s']}s,"
                    f" all bound {run['all_bound_s']}s, worker cpu {run['worker_cpu_s']}s",
                    flush=True,
                )
            else:
                run = tasks_run(stack, args, broker, n, env)
                print(
                    f"run {n}: {run['first_pass']['tasks_per_s']} tasks/s (work), "
                    f"{run['steady_pass']['tasks_per_s']} tasks/s (no-op)",
                    flush=True,
                )
            runs.append(run)
    finally:
        procs.stop_all()
        stack.close()
        redis_server.stop()
    if args.profile == "deployment":
        keys = ("replicaset_s", "all_created_s", "all_bound_s", "worker_cpu_s")
        summary = {
            k: median([r[k] for r in runs if isinstance(r.get(k), float | int)]) for k in keys
        }
        params = {"replicas": args.replicas, "nodes": args.nodes, "worker_processes": 1}
        notes = [
            "times from the API create's start; pods counted in the pods table",
            "bound = spec.nodeName set by the scheduler",
        ]
    else:
        summary = {
            "work_tasks_per_s": median([r["first_pass"]["tasks_per_s"] for r in runs]),
            "noop_tasks_per_s": median([r["steady_pass"]["tasks_per_s"] for r in runs]),
        }
        params = {
            "keys": args.keys,
            "replicas_per_key": 3,
            "worker_processes": 1,
            "pool": args.pool,
            "prefetch": os.environ.get("QM_WORKER_PREFETCH", "1"),
        }
        notes = [
            "one Celery worker process (--concurrency 1); the time runs from the first "
            "enqueue until no task is queued, pending or unacknowledged",
            "work pass: each task creates 3 pods and writes status; no-op pass: "
            "each task reads and finds nothing to write",
        ]
    summary["all_ok"] = all(r["ok"] for r in runs)
    data = {
        "benchmark": "controllers",
        "profile": args.profile,
        "machine": machine(),
        "parameters": {**params, "runs": args.runs},
        "notes": notes,
        "summary_median": summary,
        "runs": runs,
    }
    path = write_result(f"controllers-{args.profile}", data)
    print(json.dumps(summary, indent=2))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
