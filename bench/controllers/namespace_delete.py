"""Deleting big things: a namespace holding 100,000 pods, and a finished 100,000-pod Job whose
``ttlSecondsAfterFinished`` runs out, through the namespace controller and the garbage
collector (batches of 5,000 rows per statement).

    python bench/controllers/namespace_delete.py [--pods 100000] [--runs 1] [--case both]

One stack for all runs: an embedded PostgreSQL, Redis, an API server (with its revisioner
child), the dispatcher and one Celery worker (``--concurrency=2``). Per run and case, a fresh
namespace is created through the REST API and filled by COPY with pods that are not on a node
(so none waits for a grace period), and the load is waited out until the API's cache shows it.

* namespace: ``DELETE /namespaces/<ns>`` through the REST API, timed until ``GET`` answers 404
  (the namespace goes in the transaction after its last pod; the cache applies the log in
  order, so a 404 there means every pod's deletion was seen too).
* job: the pods (phase Succeeded, owned by the Job) are loaded first, then the Job is inserted
  with ``ttlSecondsAfterFinished: 0``; its controller marks it Complete and deletes it, and
  the garbage collector deletes the pods. Timed from the Job's insert until the API's pod list
  of the namespace is empty.

Also recorded: when the last pod left the table, how long the revision log took to hold every
deletion, the worker's CPU, and the load average (the machine is shared). Writes
``bench/results/controllers-namespace-delete-<timestamp>.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.common import Stack, machine, median, write_result
from bench.controllers.job import tree_cpu_seconds
from bench.scheduler.run import Procs, wait_for

API = "/apis/quaymaster.io/v1"
POD_SPEC = json.dumps({
    "containers": [{"name": "c", "image": "busybox",
                    "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}],
    "restartPolicy": "Never",
})  # fmt: skip


def copy_pods(db: psycopg.Connection[Any], ns: str, count: int, owner: str | None) -> None:
    """``count`` unbound pods ``p-000000`` ... in ``ns`` in one COPY; Succeeded and controlled
    by the Job ``owner`` (a uid) when one is given."""
    refs, status = "[]", "{}"
    if owner is not None:
        ref = {"apiVersion": "quaymaster.io/v1", "kind": "Job", "name": "big", "uid": owner,
               "controller": True, "blockOwnerDeletion": True}  # fmt: skip
        refs = json.dumps([ref])
        status = json.dumps({"phase": "Succeeded"})
    labels = json.dumps({"app": "big"})
    cols = "uid, namespace, name, labels, owner_references, spec, status"
    with db.transaction(), db.cursor() as cur, cur.copy(f"COPY pods ({cols}) FROM STDIN") as cp:
        for i in range(count):
            cp.write_row((uuid.uuid4(), ns, f"p-{i:06d}", labels, refs, POD_SPEC, status))


def insert_job(db: psycopg.Connection[Any], ns: str, uid: str, count: int) -> None:
    from app.core.admission import admit
    from app.core.kinds import BY_KIND

    job = admit(BY_KIND["Job"], {
        "apiVersion": "quaymaster.io/v1", "kind": "Job",
        "metadata": {"name": "big", "namespace": ns},
        "spec": {"completions": count, "parallelism": count, "ttlSecondsAfterFinished": 0,
                 "selector": {"matchLabels": {"app": "big"}}, "template": {
                     "metadata": {"labels": {"app": "big"}},
                     "spec": json.loads(POD_SPEC)}},
    }, None)  # fmt: skip
    db.execute("INSERT INTO jobs (uid, namespace, name, spec) VALUES (%s, %s, 'big', %s)",
               (uid, ns, json.dumps(job["spec"])))  # fmt: skip


def logged(db: psycopg.Connection[Any], ns: str, op: str) -> int:
    row = db.execute("SELECT count(*) FROM qm_revision_log WHERE kind = 'Pod' AND namespace = %s"
                     " AND op = %s", (ns, op)).fetchone()  # fmt: skip
    return int(row[0]) if row else 0


def pods_left(db: psycopg.Connection[Any], ns: str) -> int:
    row = db.execute("SELECT count(*) FROM pods WHERE namespace = %s", (ns,)).fetchone()
    return int(row[0]) if row else 0


def prepare(http: httpx.Client, db: psycopg.Connection[Any], ns: str, n: int,
            owner: str | None, timeout: float) -> float:  # fmt: skip
    """Create the namespace, load the pods, wait until the API shows them; the load's time."""
    r = http.post(f"{API}/namespaces", json={"metadata": {"name": ns}})
    assert r.status_code == 201, r.text
    wait_for("the namespace in the cache",
             lambda: http.get(f"{API}/namespaces/{ns}").status_code == 200, 60, [])  # fmt: skip
    t0 = time.monotonic()
    copy_pods(db, ns, n, owner)
    wait_for("every pod logged", lambda: logged(db, ns, "A") >= n, timeout, [])
    last = f"{API}/namespaces/{ns}/pods/p-{n - 1:06d}"
    wait_for("the last pod in the cache", lambda: http.get(last).status_code == 200, timeout, [])
    return time.monotonic() - t0


def measure(db: psycopg.Connection[Any], ns: str, n: int, done: Any, timeout: float,
            t0: float) -> dict[str, float]:  # fmt: skip
    """Poll until ``done()``; when the table emptied and the log held every deletion."""
    table_empty = log_full = None
    deadline = t0 + timeout
    while True:
        now = time.monotonic()
        if table_empty is None and pods_left(db, ns) == 0:
            table_empty = now - t0
        if log_full is None and logged(db, ns, "D") >= n:
            log_full = now - t0
        if done():
            end = time.monotonic() - t0
            break
        if now > deadline:
            raise TimeoutError(f"{ns}: not done after {timeout} s ({pods_left(db, ns)} pods left)")
        time.sleep(0.2)
    return {
        "end_to_end_s": round(end, 2),
        "table_empty_s": round(table_empty if table_empty is not None else end, 2),
        "log_has_every_deletion_s": round(log_full if log_full is not None else end, 2),
    }


def namespace_case(http: httpx.Client, db: psycopg.Connection[Any], worker: int, run: int,
                   args: argparse.Namespace) -> dict[str, Any]:  # fmt: skip
    ns = f"doomed-{run}"
    load_s = prepare(http, db, ns, args.pods, None, args.timeout)
    cpu0, load0 = tree_cpu_seconds(worker), os.getloadavg()
    t0 = time.monotonic()
    r = http.delete(f"{API}/namespaces/{ns}")
    assert r.status_code == 200, r.text

    def gone() -> bool:
        return http.get(f"{API}/namespaces/{ns}").status_code == 404

    out = measure(db, ns, args.pods, gone, args.timeout, t0)
    return {"case": "namespace", "pods": args.pods, "load_s": round(load_s, 1), **out,
            "worker_cpu_s": round(tree_cpu_seconds(worker) - cpu0, 1),
            "loadavg_before": load0, "loadavg_after": os.getloadavg()}  # fmt: skip


def job_case(http: httpx.Client, db: psycopg.Connection[Any], worker: int, run: int,
             args: argparse.Namespace) -> dict[str, Any]:  # fmt: skip
    ns = f"batch-{run}"
    uid = str(uuid.uuid4())
    load_s = prepare(http, db, ns, args.pods, uid, args.timeout)
    cpu0, load0 = tree_cpu_seconds(worker), os.getloadavg()
    t0 = time.monotonic()
    insert_job(db, ns, uid, args.pods)
    job_gone: list[float] = []

    def empty() -> bool:
        if not job_gone and http.get(f"{API}/namespaces/{ns}/jobs/big").status_code == 404:
            job_gone.append(time.monotonic() - t0)
        if not job_gone or pods_left(db, ns):
            return False
        listed = http.get(f"{API}/namespaces/{ns}/pods", params={"limit": "1"}).json()
        return listed["items"] == []

    out = measure(db, ns, args.pods, empty, args.timeout, t0)
    return {"case": "job-ttl", "pods": args.pods, "load_s": round(load_s, 1), **out,
            "job_gone_s": round(job_gone[0], 2) if job_gone else None,
            "worker_cpu_s": round(tree_cpu_seconds(worker) - cpu0, 1),
            "loadavg_before": load0, "loadavg_after": os.getloadavg()}  # fmt: skip


def main() -> None:
    from app.devstack.redis import EmbeddedRedis

    ap = argparse.ArgumentParser()
    ap.add_argument("--pods", type=int, default=100_000)
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--case", choices=("both", "namespace", "job"), default="both")
    ap.add_argument("--timeout", type=float, default=900)
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    stack = Stack()
    redis = EmbeddedRedis(Path(stack.tmp) / "redis")
    redis.start()
    os.environ["QM_BROKER_URL"] = redis.url  # the API server started below reads it too
    procs = Procs()
    logdir = Path(stack.tmp) / "logs"
    logdir.mkdir(parents=True, exist_ok=True)
    print(f"logs: {logdir}", flush=True)
    runs: list[dict[str, Any]] = []
    env = {"DATABASE_URL": stack.url, "QM_STREAM_DATABASE_URL": stack.url,
           "QM_BROKER_URL": redis.url}  # fmt: skip
    try:
        stack.start_api()
        procs.start(["-m", "workers.dispatch"], env, logdir / "dispatch.log")
        worker = procs.start(["-m", "celery", "-A", "workers.app", "worker", "--concurrency=2",
                              "--without-gossip", "--without-mingle", "--loglevel=WARNING"],
                             env, logdir / "worker.log")  # fmt: skip
        time.sleep(3.0)  # the worker and the dispatcher are listening
        headers = {"Authorization": f"Bearer {stack.token}"}
        with (httpx.Client(base_url=stack.api_url, headers=headers, timeout=60) as http,
              psycopg.connect(stack.url, autocommit=True) as db):  # fmt: skip
            for n in range(args.runs):
                cases = {"both": (namespace_case, job_case), "namespace": (namespace_case,),
                         "job": (job_case,)}[args.case]  # fmt: skip
                for case in cases:
                    r = case(http, db, worker.pid, n, args)
                    runs.append(r)
                    print(json.dumps(r), flush=True)
    finally:
        procs.stop_all()
        stack.close()
        redis.stop()
    summary = {
        case: {k: median([r[k] for r in runs if r["case"] == case])
               for k in ("end_to_end_s", "table_empty_s", "log_has_every_deletion_s",
                         "worker_cpu_s")}
        for case in {r["case"] for r in runs}
    }  # fmt: skip
    data = {
        "benchmark": "controllers-namespace-delete",
        "machine": machine(),
        "parameters": {
            "pods": args.pods,
            "runs": args.runs,
            "batch_rows": 5000,
            "worker": "one Celery worker process (--concurrency=2)",
            "pods_on_nodes": False,
        },
        "notes": [
            "namespace end_to_end_s: from DELETE /namespaces/<ns> to GET answering 404",
            "job-ttl end_to_end_s: from the Job's insert (ttlSecondsAfterFinished 0, its pods "
            "Succeeded) until the API lists no pod in the namespace",
            "table_empty_s: the last pod left the table; log_has_every_deletion_s: the revision "
            "log holds a deletion entry for every pod",
            "one stack: PostgreSQL, Redis, the API server and its revisioner, the dispatcher and "
            "the worker share a 2-CPU machine with other work; loadavg_* are os.getloadavg()",
        ],
        "summary_median": summary,
        "runs": runs,
    }
    path = write_result("controllers-namespace-delete", data)
    print(json.dumps(summary, indent=2))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
