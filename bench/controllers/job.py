"""Job controller benchmark: how fast one Celery worker turns a 100,000-task Job into pods while
the real scheduler places them on 10,000 nodes, and whether pacing holds the unbound backlog.

    python bench/controllers/job.py [--nodes 10000] [--tasks 100000] [--runs 3]
                                    [--batch 2000] [--window 4000]

Each run gets a fresh database, its own revisioner, dispatcher, one Celery worker process
(``--concurrency=1``) and the scheduler. Measured from the database afterwards: the pods'
``creation_timestamp`` (first to last pod, and pods created in each second), ``bound_at`` (time
until every pod is bound), and from a sampler polling four times a second, the most unbound pods
of the Job seen at once. Writes ``bench/results/controllers-job-<timestamp>.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from app.stream.revisioner import streaming
from bench.common import ROOT, Stack, free_port, machine, median, write_result
from bench.scheduler.run import Procs, cpu_seconds, postgres_cpu_seconds, scrape, wait_for

NS = "batch"
SUMMARY_KEYS = ("create_s", "pods_per_s", "peak_pods_per_s", "max_unbound", "all_bound_s",
                "worker_cpu_s", "scheduler_cpu_s", "postgres_cpu_s")  # fmt: skip


def tree_cpu_seconds(pid: int) -> float:
    """CPU of a process and its live descendants (Celery's pool children do the work)."""
    total = cpu_seconds(pid)
    for task in Path(f"/proc/{pid}/task").iterdir():
        for child in (task / "children").read_text().split():
            total += tree_cpu_seconds(int(child))
    return total


def copy_nodes(
    db: psycopg.Connection[Any], count: int, cpu: str = "32", memory: str = "128Gi"
) -> None:
    """``count`` Ready nodes ``node-00000`` ... over three zones, in one COPY."""
    status = json.dumps({
        "allocatable": {"cpu": cpu, "memory": memory, "pods": "110"},
        "capacity": {"cpu": cpu, "memory": memory, "pods": "110"},
        "conditions": [{"type": "Ready", "status": "True"}],
    })  # fmt: skip
    with (
        db.transaction(),
        db.cursor() as cur,
        cur.copy("COPY nodes (uid, name, labels, spec, status) FROM STDIN") as cp,
    ):
        for i in range(count):
            name = f"node-{i:05d}"
            labels = {"topology.kubernetes.io/zone": f"zone-{'abc'[i % 3]}",
                      "kubernetes.io/hostname": name}  # fmt: skip
            cp.write_row((uuid.uuid4(), name, json.dumps(labels), "{}", status))


def insert_job(db: psycopg.Connection[Any], tasks: int) -> str:
    from app.core.admission import admit
    from app.core.kinds import BY_KIND

    container = {"name": "task", "image": "busybox",
                 "resources": {"requests": {"cpu": "100m", "memory": "256Mi"}}}  # fmt: skip
    job = admit(BY_KIND["Job"], {
        "apiVersion": "quaymaster.io/v1", "kind": "Job",
        "metadata": {"name": "big", "namespace": NS},
        "spec": {"completions": tasks, "parallelism": tasks, "template": {
            "metadata": {"labels": {"app": "big"}},
            "spec": {"restartPolicy": "Never", "containers": [container]}}},
    }, None)  # fmt: skip
    uid = str(uuid.uuid4())
    db.execute("INSERT INTO jobs (uid, namespace, name, spec) VALUES (%s, %s, %s, %s)",
               (uid, NS, "big", json.dumps(job["spec"])))  # fmt: skip
    return uid


def one_run(stack: Stack, redis_url: str, args: argparse.Namespace, n: int, procs: Procs,
            logdir: Path) -> dict[str, Any]:  # fmt: skip
    from app.devstack.postgres import create_database

    url = create_database(stack.url, f"qm_bench_job_{n}_{secrets.token_hex(3)}")
    run_log = logdir / f"run{n}"
    run_log.mkdir(parents=True, exist_ok=True)
    env = {"DATABASE_URL": url, "QM_STREAM_DATABASE_URL": url,
           "QM_BROKER_URL": redis_url.rsplit("/", 1)[0] + f"/{n + 1}",
           "QM_JOB_CREATE_BATCH": str(args.batch),
           "QM_JOB_PENDING_WINDOW": str(args.window)}  # fmt: skip
    subprocess.run([sys.executable, "-m", "alembic", "upgrade", "head"], cwd=ROOT,
                   env={**os.environ, **env},
                   check=True, capture_output=True)  # fmt: skip
    db = psycopg.connect(url, autocommit=True)
    stop = threading.Event()
    try:
        rev = procs.start(["-m", "app.stream"], {**env, "QM_HISTORY_SECONDS": "86400"},
                          run_log / "revisioner.log")  # fmt: skip
        wait_for("the revisioner to stream", lambda: streaming(db), 120, [rev])
        copy_nodes(db, args.nodes)
        port = free_port()
        sched = procs.start(["-m", "app.scheduler", "--metrics-port", str(port)], env,
                            run_log / "scheduler.log")  # fmt: skip
        wait_for("the scheduler to lead with all nodes", lambda: scrape(port).get(
            "scheduler_nodes") == args.nodes and scrape(port).get("scheduler_is_leader") == 1,
            300, [sched, rev])  # fmt: skip
        disp = procs.start(["-m", "workers.dispatch"], env, run_log / "dispatch.log")
        worker = procs.start(["-m", "celery", "-A", "workers.app", "worker", "--concurrency=1",
                              "--without-gossip", "--without-mingle", "--loglevel=WARNING"],
                             env, run_log / "worker.log")  # fmt: skip
        time.sleep(3.0)  # the worker and the dispatcher are listening
        cpu0 = {"worker": tree_cpu_seconds(worker.pid), "scheduler": cpu_seconds(sched.pid),
                "postgres": postgres_cpu_seconds(stack.pg.pid if stack.pg else None)}  # fmt: skip
        series: list[tuple[float, int, int]] = []

        def sampler() -> None:
            with psycopg.connect(url, autocommit=True) as c:
                while not stop.is_set():
                    row = c.execute(
                        "SELECT count(*), count(*) FILTER (WHERE node_name IS NULL)"
                        " FROM pods WHERE namespace = %s", (NS,)).fetchone()  # fmt: skip
                    series.append((time.monotonic(), int(row[0]), int(row[1])))  # type: ignore[index]
                    stop.wait(0.25)

        thread = threading.Thread(target=sampler, daemon=True)
        thread.start()
        t0 = time.monotonic()
        submitted = db.execute("SELECT clock_timestamp()").fetchone()[0]  # type: ignore[index]
        insert_job(db, args.tasks)

        def done() -> bool:
            return bool(series) and series[-1][1] >= args.tasks and series[-1][2] == 0

        wait_for("every pod created and bound", done, args.timeout, [sched, rev, disp, worker])
        wall = time.monotonic() - t0
        stop.set()
        thread.join()
        cpu = {"worker": tree_cpu_seconds(worker.pid) - cpu0["worker"],
               "scheduler": cpu_seconds(sched.pid) - cpu0["scheduler"],
               "postgres": postgres_cpu_seconds(stack.pg.pid if stack.pg else None)
               - cpu0["postgres"]}  # fmt: skip
        first, last, bound_last = db.execute(
            "SELECT min(creation_timestamp), max(creation_timestamp), max(bound_at) FROM pods"
            " WHERE namespace = %s", (NS,)).fetchone()  # type: ignore[misc]  # fmt: skip
        per_second = [int(r[1]) for r in db.execute(
            "SELECT date_trunc('second', creation_timestamp) s, count(*) FROM pods"
            " WHERE namespace = %s GROUP BY 1 ORDER BY 1", (NS,)).fetchall()]  # fmt: skip
        create_s = (last - first).total_seconds()
        return {
            "pods": series[-1][1],
            "create_s": round(create_s, 2),
            "pods_per_s": round(args.tasks / create_s, 1) if create_s else None,
            "peak_pods_per_s": max(per_second),
            "pods_created_per_second": per_second,
            "max_unbound": max(s[2] for s in series),
            "all_bound_s": round((bound_last - submitted).total_seconds(), 2),
            "first_pod_after_submit_s": round((first - submitted).total_seconds(), 2),
            "wall_s": round(wall, 2),
            "worker_cpu_s": round(cpu["worker"], 1),
            "scheduler_cpu_s": round(cpu["scheduler"], 1),
            "postgres_cpu_s": round(cpu["postgres"], 1),
            "ok": max(s[2] for s in series) <= args.window + args.batch,
        }
    finally:
        stop.set()
        procs.stop_all()
        db.close()


def main() -> None:
    from app.devstack.redis import EmbeddedRedis

    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=10_000)
    ap.add_argument("--tasks", type=int, default=100_000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--batch", type=int, default=2000, help="QM_JOB_CREATE_BATCH")
    ap.add_argument("--window", type=int, default=4000, help="QM_JOB_PENDING_WINDOW")
    ap.add_argument("--timeout", type=float, default=1800)
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    stack = Stack()
    redis = EmbeddedRedis(Path(stack.tmp) / "redis")
    redis.start()
    procs = Procs()
    logdir = Path(stack.tmp) / "logs"
    print(f"logs: {logdir}", flush=True)
    runs: list[dict[str, Any]] = []
    try:
        for n in range(args.runs):
            r = one_run(stack, redis.url, args, n, procs, logdir)
            runs.append(r)
            print(f"run {n}: {r['pods_per_s']} pods/s over {r['create_s']} s, peak "
                  f"{r['peak_pods_per_s']}/s, max unbound {r['max_unbound']}, all bound "
                  f"after {r['all_bound_s']} s, worker cpu {r['worker_cpu_s']} s",
                  flush=True)  # fmt: skip
    finally:
        procs.stop_all()
        redis.stop()
        stack.close()
    summary = {k: median([r[k] for r in runs if isinstance(r.get(k), (int, float))])
               for k in SUMMARY_KEYS}  # fmt: skip
    data = {
        "benchmark": "controllers-job",
        "machine": machine(),
        "parameters": {"nodes": args.nodes, "tasks": args.tasks, "runs": args.runs,
                       "create_batch": args.batch, "pending_window": args.window,
                       "worker": "one Celery worker process (--concurrency=1)",
                       "pod": {"cpu": "100m", "memory": "256Mi", "restartPolicy": "Never"}},
        "notes": [
            "create_s: first to last pod creation_timestamp (transaction start time, database "
            "clock); pods_per_s = tasks / create_s",
            "all_bound_s: from the Job's insert to the last pods.bound_at",
            "max_unbound: most of the Job's pods without spec.nodeName seen by a sampler "
            "polling every 0.25 s; pacing bounds it by window + batch",
            "the scheduler, revisioner, dispatcher, worker and PostgreSQL share the machine",
        ],
        "summary_median": summary,
        "runs": runs,
    }  # fmt: skip
    path = write_result("controllers-job", data)
    print(json.dumps(summary, indent=2))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
