"""Scheduler benchmark: one scheduler process draining a 100,000-task batch job submitted at
once onto 10,000 nodes, while production pods arrive at a steady rate; beside it, in the same
run on the same server, the rate at which PostgreSQL commits the scheduler's own bind
transactions with no scheduling work in front of them.

    python bench/scheduler/run.py [--profile burst|affinity] [--nodes 10000] [--tasks 100000]
                                  [--prod-rate 50] [--runs 3]

Each run gets a fresh database (migrated with ``alembic upgrade head``), its own revisioner
process (``python -m app.stream``) and its own scheduler process (``python -m app.scheduler``).
Writes ``bench/results/scheduler-<profile>-<timestamp>.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import contextlib

from app.stream.revisioner import streaming
from bench.common import ROOT, Stack, free_port, machine, median, percentile, write_result
from bench.loaders import NODE_COLUMNS, POD_COLUMNS, copy_rows
from bench.scheduler.measure import (
    BATCH_NS,
    BATCH_SIZE,
    IN_FLIGHT,
    PROD_NS,
    RAW_NS,
    Binds,
    check_placements,
    collect_binds,
    raw_binds,
    round_robin,
)

ZONES = ("zone-a", "zone-b", "zone-c")
CHUNK = 5000  # pods per COPY transaction when submitting the batch job
CLK_TCK = os.sysconf("SC_CLK_TCK")
UNBOUND = "SELECT count(*) FROM pods WHERE node_name IS NULL"


# -- objects ------------------------------------------------------------------------------------
def container(cpu: str, memory: str) -> list[dict[str, Any]]:
    return [
        {
            "name": "main",
            "image": "registry.local/worker@sha256:" + "b" * 64,
            "resources": {"requests": {"cpu": cpu, "memory": memory}},
        }
    ]


def anti_affinity(key: str, value: str) -> dict[str, Any]:
    return {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {
                    "labelSelector": {"matchLabels": {key: value}},
                    "topologyKey": "kubernetes.io/hostname",
                }
            ]
        }
    }


def spread(key: str, value: str, when: str) -> list[dict[str, Any]]:
    return [
        {
            "maxSkew": 1,
            "topologyKey": "topology.kubernetes.io/zone",
            "whenUnsatisfiable": when,
            "labelSelector": {"matchLabels": {key: value}},
        }
    ]


def batch_pod(i: int, profile: str, group_size: int) -> tuple[dict[str, str], dict[str, Any]]:
    labels = {"job-name": "big"}
    spec: dict[str, Any] = {
        "priority": 100,
        "terminationGracePeriodSeconds": 30,
        "restartPolicy": "Never",
        "containers": container("100m", "256Mi"),
    }
    if profile == "affinity":
        group = f"g-{i // group_size}"
        labels["group"] = group
        spec["affinity"] = anti_affinity("group", group)
        spec["topologySpreadConstraints"] = spread("group", group, "DoNotSchedule")
    return labels, spec


def prod_pod(i: int, profile: str) -> tuple[dict[str, str], dict[str, Any]]:
    svc = f"svc-{i // 10}"
    spec: dict[str, Any] = {
        "priority": 2000,
        "terminationGracePeriodSeconds": 30,
        "containers": container("500m", "1Gi"),
    }
    if profile == "affinity":
        spec["affinity"] = anti_affinity("app", svc)
        spec["topologySpreadConstraints"] = spread("app", svc, "DoNotSchedule")
    else:
        spec["topologySpreadConstraints"] = spread("app", svc, "ScheduleAnyway")
    return {"app": svc}, spec


OWNER_UID = str(uuid.uuid4())


def copy_pods(db: psycopg.Connection[Any], ns: str, rows: list[tuple[str, dict, dict]]) -> None:
    """One transaction: COPY the pods in (the batch namespace's owned by the job)."""
    owner = [{"apiVersion": "batch/v1", "kind": "Job", "name": "big", "uid": OWNER_UID,
              "controller": True}]  # fmt: skip
    owners = owner if ns == BATCH_NS else []
    copy_rows(db, "pods", POD_COLUMNS,
              ((None, ns, name, labels, owners, spec) for name, labels, spec in rows))  # fmt: skip


# -- processes ----------------------------------------------------------------------------------
class Procs:
    """Everything this benchmark starts, stopped by pid."""

    def __init__(self) -> None:
        self.live: list[subprocess.Popen[bytes]] = []

    def start(self, argv: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
        out = open(log, "ab")  # noqa: SIM115 - owned by the child
        proc = subprocess.Popen(
            [sys.executable, *argv],
            cwd=ROOT,
            env={**os.environ, **env, "QM_DIE_WITH_PARENT": "1"},
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        out.close()
        self.live.append(proc)
        return proc

    def stop(self, proc: subprocess.Popen[bytes]) -> None:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if proc in self.live:
            self.live.remove(proc)

    def stop_all(self) -> None:
        for p in list(reversed(self.live)):
            self.stop(p)


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime, stime


def postgres_cpu_seconds(postmaster: int | None) -> float:
    """CPU of the postmaster, its live children and the children it has reaped."""
    if postmaster is None:
        return float("nan")
    with open(f"/proc/{postmaster}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    total = sum(int(x) for x in fields[11:15]) / CLK_TCK  # utime stime cutime cstime
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == postmaster:
            total += (int(fields[11]) + int(fields[12])) / CLK_TCK
    return total


def status_kib(pid: int, key: str) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return -1


def scrape(port: int) -> dict[str, float]:
    """The scheduler's metrics as {"name{labels}": value} ({} while it is not answering)."""
    try:
        text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    except httpx.HTTPError:
        return {}
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.rpartition(" ")
            with contextlib.suppress(ValueError):
                out[key] = float(value)
    return out


def family(metrics: dict[str, float], name: str) -> dict[str, float]:
    return {k[len(name):] or "": v for k, v in metrics.items() if k.startswith(name + "{")
            or k == name}  # fmt: skip


def wait_for(what: str, predicate: Any, timeout: float, procs: list[Any] = ()) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        for p in procs:
            if p.poll() is not None:
                raise RuntimeError(f"a process exited ({p.args}) while waiting for {what}")
        time.sleep(0.2)
    raise RuntimeError(f"timed out waiting for {what}")


# -- one run ------------------------------------------------------------------------------------
@dataclass
class Run:
    """One run's fresh database, its connection and the processes started for it."""

    stack: Stack
    args: argparse.Namespace
    procs: Procs
    dbname: str
    url: str
    log: Path
    db: psycopg.Connection[Any]
    rev: subprocess.Popen[bytes] | None = None

    @property
    def env(self) -> dict[str, str]:
        return {"DATABASE_URL": self.url, "QM_STREAM_DATABASE_URL": self.url}

    def stream_at(self) -> int:
        return int(self.db.execute("SELECT last_revision FROM qm_stream_state").fetchone()[0])

    def count(self, sql: str, *params: Any) -> int:
        return int(self.db.execute(sql, params or None).fetchone()[0])

    def postgres_cpu(self) -> float:
        return postgres_cpu_seconds(self.stack.pg.pid if self.stack.pg else None)


def create_run(stack: Stack, args: argparse.Namespace, n: int, procs: Procs, logdir: Path) -> Run:
    """A fresh database migrated with ``alembic upgrade head``, and a connection to it."""
    from app.devstack.postgres import create_database

    dbname = f"qm_bench_sched_{n}_{secrets.token_hex(3)}"
    url = create_database(stack.url, dbname)
    run_log = logdir / f"run{n}"
    run_log.mkdir(parents=True, exist_ok=True)
    env = {"DATABASE_URL": url, "QM_STREAM_DATABASE_URL": url}
    subprocess.run([sys.executable, "-m", "alembic", "upgrade", "head"], cwd=ROOT,
                   env={**os.environ, **env}, check=True, capture_output=True)  # fmt: skip
    return Run(stack, args, procs, dbname, url, run_log, psycopg.connect(url, autocommit=True))


def start_revisioner(run: Run) -> subprocess.Popen[bytes]:
    # History is kept for the whole run: the measurements read it afterwards.
    run.rev = run.procs.start(["-m", "app.stream"], {**run.env, "QM_HISTORY_SECONDS": "86400",
                              "QM_LOG_LEVEL": "info"}, run.log / "revisioner.log")  # fmt: skip
    wait_for("the revisioner to stream", lambda: streaming(run.db), 120, [run.rev])
    return run.rev


def load_nodes(run: Run) -> dict[str, float]:
    """COPY the nodes in, then wait until they are in the revision log."""
    args = run.args
    t0 = time.monotonic()
    status = {
        "allocatable": {"cpu": "32", "memory": "128Gi", "pods": "110"},
        "capacity": {"cpu": "32", "memory": "128Gi", "pods": "110"},
        "conditions": [{"type": "Ready", "status": "True"}],
    }
    rows = (
        (None, name, {"topology.kubernetes.io/zone": ZONES[i % 3], "kubernetes.io/hostname": name},
         {}, status)
        for i, name in ((i, f"node-{i:05d}") for i in range(args.nodes))
    )  # fmt: skip
    copy_rows(run.db, "nodes", NODE_COLUMNS, rows)
    nodes_insert_s = time.monotonic() - t0
    wait_for("the nodes in the revision log", lambda: run.stream_at() >= args.nodes, 300,
             [run.rev])  # fmt: skip
    return {"nodes_insert_s": nodes_insert_s, "nodes_streamed_s": time.monotonic() - t0}


def write_batch_job(run: Run) -> None:
    """The batch job's tasks, CHUNK pods per COPY transaction."""
    rows = []
    for i in range(run.args.tasks):
        labels, spec = batch_pod(i, run.args.profile, run.args.group_size)
        rows.append((f"big-{i:06d}", labels, spec))
        if len(rows) == CHUNK:
            copy_pods(run.db, BATCH_NS, rows)
            rows = []
    if rows:
        copy_pods(run.db, BATCH_NS, rows)


def queue_batch_job(run: Run) -> float:
    """With --queued: the whole job is pending and in the revision log before the scheduler
    starts, to measure what placement alone sustains, without the submission competing for
    the cores. Returns the submission's seconds."""
    t0 = time.monotonic()
    write_batch_job(run)
    submit_s = time.monotonic() - t0
    total = run.args.nodes + run.args.tasks
    wait_for("the batch job in the revision log", lambda: run.stream_at() >= total, 600,
             [run.rev])  # fmt: skip
    return submit_s


def start_scheduler(run: Run) -> tuple[subprocess.Popen[bytes], int, float]:
    """The scheduler process, once it leads with every node in its snapshot: (process, metrics
    port, seconds until then)."""
    port = free_port()
    t0 = time.monotonic()
    argv = ["-m", "app.scheduler", "--metrics-port", str(port)]
    sched = run.procs.start(argv, {**run.env, "QM_LOG_LEVEL": "info"}, run.log / "scheduler.log")

    def ready() -> bool:
        m = scrape(port)
        return m.get("scheduler_nodes") == run.args.nodes and m.get("scheduler_is_leader") == 1

    wait_for("the scheduler to lead with all nodes", ready, 300, [sched, run.rev])
    return sched, port, time.monotonic() - t0


class Background:
    """The two threads beside the drain, each on its own connection: the sampler counts
    unbound pods once a second; the producer inserts production pods, each in its own
    transaction, at a steady rate."""

    def __init__(self, run: Run) -> None:
        self.run = run
        self.series: list[tuple[float, int]] = []
        self.prod_created = 0
        self.prod_stop = threading.Event()
        self.sampler_stop = threading.Event()
        self.threads: list[threading.Thread] = []

    def start(self) -> None:
        self.threads = [threading.Thread(target=self.sample, daemon=True),
                        threading.Thread(target=self.produce, daemon=True)]  # fmt: skip
        for t in self.threads:
            t.start()

    def sample(self) -> None:
        with psycopg.connect(self.run.url, autocommit=True) as c:
            while not self.sampler_stop.is_set():
                t = time.monotonic()
                unbound = c.execute(UNBOUND).fetchone()[0]
                self.series.append((t, int(unbound)))
                self.sampler_stop.wait(max(0.0, 1.0 - (time.monotonic() - t)))

    def produce(self) -> None:
        args = self.run.args
        with psycopg.connect(self.run.url, autocommit=True) as c:
            interval = 1.0 / args.prod_rate
            nxt = time.monotonic()
            i = 0
            while not self.prod_stop.is_set():
                labels, spec = prod_pod(i, args.profile)
                c.execute(
                    "INSERT INTO pods (uid, namespace, name, labels, spec, creation_timestamp)"
                    " VALUES (%s, %s, %s, %s, %s, clock_timestamp())",
                    (uuid.uuid4(), PROD_NS, f"web-{i:06d}", json.dumps(labels), json.dumps(spec)),
                )
                i += 1
                self.prod_created = i
                nxt += interval
                delay = nxt - time.monotonic()
                if delay > 0:
                    self.prod_stop.wait(delay)

    def stop_producer(self) -> None:
        self.prod_stop.set()
        if len(self.threads) > 1:
            self.threads[1].join()

    def stop_sampler(self) -> None:
        self.sampler_stop.set()
        if self.threads:
            self.threads[0].join()

    def stop(self) -> None:
        self.prod_stop.set()
        self.sampler_stop.set()
        for t in self.threads:
            t.join(timeout=10)


@dataclass
class Drain:
    submit_at: datetime  # database clock when the submission started
    t_submit: float  # monotonic, the same moment
    submit_s: float
    drained_wall_s: float


def drain(run: Run, bg: Background, sched: subprocess.Popen[bytes], queued_submit_s: float
          ) -> Drain:  # fmt: skip
    """Submit the batch job (unless it was queued) with production pods arriving, and wait
    until every pod is bound and the revision log has caught up."""
    submit_at = run.db.execute("SELECT clock_timestamp()").fetchone()[0]
    t_submit = time.monotonic()
    bg.start()
    if run.args.queued:
        submit_s = queued_submit_s
    else:
        write_batch_job(run)
        submit_s = time.monotonic() - t_submit
    unbound_batch = "SELECT count(*) FROM pods WHERE namespace = %s AND node_name IS NULL"
    wait_for("the batch job to be bound", lambda: run.count(unbound_batch, BATCH_NS) == 0,
             run.args.timeout, [sched, run.rev])  # fmt: skip
    drained_wall_s = time.monotonic() - t_submit
    bg.stop_producer()
    wait_for("the production pods to be bound", lambda: run.count(UNBOUND) == 0, 120,
             [sched, run.rev])  # fmt: skip
    bg.stop_sampler()
    # The stream has caught up once every pod's current row version is in the log.
    wait_for("the revision log to catch up", lambda: run.db.execute(
        "SELECT NOT EXISTS (SELECT 1 FROM pods p WHERE NOT EXISTS (SELECT 1 FROM"
        " qm_revision_log l WHERE l.uid = p.uid AND l.row_version = p.row_version))"
    ).fetchone()[0], 300, [run.rev])  # fmt: skip
    return Drain(submit_at, t_submit, submit_s, drained_wall_s)


def cpu_marks(run: Run, sched: subprocess.Popen[bytes]) -> tuple[float, float, float]:
    """CPU seconds so far of the scheduler, the revisioner and PostgreSQL."""
    assert run.rev is not None
    return cpu_seconds(sched.pid), cpu_seconds(run.rev.pid), run.postgres_cpu()


def process_usage(run: Run, sched: subprocess.Popen[bytes], marks: tuple[float, float, float]
                  ) -> dict[str, float]:  # fmt: skip
    """CPU since ``marks`` and memory of the processes, read before the scheduler stops."""
    assert run.rev is not None
    sched_cpu0, rev_cpu0, pg_cpu0 = marks
    return {
        "sched_cpu": cpu_seconds(sched.pid) - sched_cpu0,
        "rev_cpu": cpu_seconds(run.rev.pid) - rev_cpu0,
        "pg_cpu": run.postgres_cpu() - pg_cpu0,
        "sched_hwm": status_kib(sched.pid, "VmHWM") / 1024,
        "sched_rss": status_kib(sched.pid, "VmRSS") / 1024,
        "rev_hwm": status_kib(run.rev.pid, "VmHWM") / 1024,
    }


def raw_bind_rate(run: Run) -> dict[str, Any]:
    """The raw bind rate: same server, same database, no scheduler running. Fresh unbound
    pods, bound by ``bind_many`` to precomputed round-robin decisions."""
    assert run.rev is not None
    db = run.db
    t0 = time.monotonic()
    raw_rows = []
    for i in range(run.args.tasks):
        labels, spec = batch_pod(i, "burst", run.args.group_size)
        raw_rows.append((f"r{i}", labels, spec))
        if len(raw_rows) == CHUNK:
            copy_pods(db, RAW_NS, raw_rows)
            raw_rows = []
    if raw_rows:
        copy_pods(db, RAW_NS, raw_rows)
    wait_for("the raw pods in the revision log", lambda: db.execute(
        "SELECT NOT EXISTS (SELECT 1 FROM pods p WHERE p.namespace = %s AND NOT EXISTS"
        " (SELECT 1 FROM qm_revision_log l WHERE l.uid = p.uid"
        " AND l.row_version = p.row_version))", (RAW_NS,)
    ).fetchone()[0], 300, [run.rev])  # fmt: skip
    db.execute("VACUUM (ANALYZE) pods, nodes_allocated")
    pods = [
        (str(r[0]), int(r[1]), int(r[2]), int(r[3]))
        for r in db.execute(
            "SELECT uid, row_version, req_cpu_milli, req_memory_bytes FROM pods"
            " WHERE namespace = %s ORDER BY name", (RAW_NS,)
        ).fetchall()
    ]  # fmt: skip
    nodes = round_robin(db, len(pods))
    pods = pods[: len(nodes)]
    rev_cpu_raw0 = cpu_seconds(run.rev.pid)
    pg_cpu_raw0 = run.postgres_cpu()
    raw = asyncio.run(raw_binds(run.url, pods, nodes))
    raw["postgres_cpu_s"] = round(run.postgres_cpu() - pg_cpu_raw0, 2)
    raw["revisioner_cpu_s"] = round(cpu_seconds(run.rev.pid) - rev_cpu_raw0, 2)
    raw["setup_s"] = round(time.monotonic() - t0 - raw["seconds"], 1)
    return raw


def tear_down(run: Run, bg: Background) -> None:
    from app.devstack.postgres import drop_database, with_database

    bg.stop()
    run.procs.stop_all()
    run.db.close()
    if not run.args.keep:
        try:
            drop_database(with_database(run.stack.url, "postgres"), run.dbname)
        except Exception as exc:
            print(f"dropping {run.dbname} failed: {exc}", file=sys.stderr)


def one_run(stack: Stack, args: argparse.Namespace, n: int, procs: Procs, logdir: Path
            ) -> dict[str, Any]:  # fmt: skip
    """Set up, load the nodes, start the scheduler, drain the job, measure, verify."""
    run = create_run(stack, args, n, procs, logdir)
    bg = Background(run)
    try:
        rev = start_revisioner(run)
        nodes = load_nodes(run)
        queued_submit_s = queue_batch_job(run) if args.queued else 0.0
        sched, port, scheduler_ready_s = start_scheduler(run)
        marks = cpu_marks(run, sched)
        d = drain(run, bg, sched, queued_submit_s)
        usage = process_usage(run, sched, marks)
        metrics = scrape(port)
        procs.stop(sched)
        binds = collect_binds(run.db, d.submit_at)
        checks = check_placements(run.db, args.profile)
        raw = raw_bind_rate(run)
        procs.stop(rev)
        return result_of(run, nodes, scheduler_ready_s, d, usage, metrics, binds, checks,
                         raw, bg.series)  # fmt: skip
    finally:
        tear_down(run, bg)


def result_of(
    run: Run,
    nodes: dict[str, float],
    scheduler_ready_s: float,
    d: Drain,
    usage: dict[str, float],
    metrics: dict[str, float],
    b: Binds,
    checks: dict[str, Any],
    raw: dict[str, Any],
    series: list[tuple[float, int]],
) -> dict[str, Any]:
    """One run's result, in the format of earlier result files."""
    args = run.args
    batch_first = min(b.batch_bound_at)
    batch_last = max(b.batch_bound_at)
    first, last = b.first, b.last
    bound_in_drain = sum(1 for t in b.all_bound_at if t <= batch_last)
    drain_s = batch_last  # submit -> the last batch pod's bind in the log
    placement_window = last - first if last > first else float("nan")
    sched_cpu = usage["sched_cpu"]
    result = {
        "database": run.dbname,
        "nodes_insert_s": round(nodes["nodes_insert_s"], 2),
        "nodes_streamed_s": round(nodes["nodes_streamed_s"], 2),
        "scheduler_ready_s": round(scheduler_ready_s, 2),
        "submit_s": round(d.submit_s, 2),
        "submit_pods_per_s": round(args.tasks / d.submit_s),
        "batch_drain_s": round(drain_s, 2),
        "batch_drain_wall_s": round(d.drained_wall_s, 2),
        "first_bind_after_submit_s": round(first, 2),
        "batch_first_bind_s": round(batch_first, 2),
        "placements_per_s": round(len(b.all_bound_at) / placement_window, 1),
        "placements_per_s_during_drain": round(bound_in_drain / (batch_last - first), 1)
        if batch_last > first
        else None,
        "pods_bound": len(b.all_bound_at),
        "prod_pods": b.n_prod,
        "prod_created_to_bound_p50_ms": round(percentile(b.prod_bound, 50) * 1000, 1),
        "prod_created_to_bound_p99_ms": round(percentile(b.prod_bound, 99) * 1000, 1),
        "prod_created_to_bound_max_ms": round(max(b.prod_bound, default=float("nan")) * 1000, 1),
        "prod_created_to_visible_p50_ms": round(percentile(b.prod_log, 50) * 1000, 1),
        "prod_created_to_visible_p99_ms": round(percentile(b.prod_log, 99) * 1000, 1),
        "stream_lag_after_bind_p50_ms": round(percentile(b.stream_lag, 50) * 1000, 1),
        "stream_lag_after_bind_p99_ms": round(percentile(b.stream_lag, 99) * 1000, 1),
        "prod_zone_counts": checks["zones"],
        "scheduler_cpu_s": round(sched_cpu, 2),
        "scheduler_cpu_per_1k_pods_s": round(sched_cpu / len(b.all_bound_at) * 1000, 3),
        "scheduler_peak_rss_mib": round(usage["sched_hwm"], 1),
        "scheduler_rss_mib_at_end": round(usage["sched_rss"], 1),
        "revisioner_cpu_s": round(usage["rev_cpu"], 2),
        "revisioner_peak_rss_mib": round(usage["rev_hwm"], 1),
        "postgres_cpu_s": round(usage["pg_cpu"], 2),
        "bind_conflicts": family(metrics, "scheduler_bind_conflicts_total"),
        "schedule_attempts": family(metrics, "scheduler_schedule_attempts_total"),
        "bind_batch_seconds_sum": metrics.get("scheduler_bind_batch_seconds_sum"),
        "bind_batch_count": metrics.get("scheduler_bind_batch_seconds_count"),
        "cycle_seconds_sum": metrics.get("scheduler_cycle_seconds_sum"),
        "cycle_count": metrics.get("scheduler_cycle_seconds_count"),
        "verify": {
            "unbound": b.unbound,
            "bind_transitions_per_pod": {str(k): v for k, v in sorted(b.bind_counts.items())},
            "nodes_over_allocated": checks["over"],
            "nodes_allocated_mismatch": checks["alloc_mismatch"],
            "pods_per_node_min_max": list(checks["per_node"]),
            "affinity_violations": checks["affinity_violations"],
        },
        "bound_per_second": b.per_second(),
        "unbound_sampled": [[round(t - d.t_submit, 2), u] for t, u in series],
        "raw_bind_many": raw,
    }
    result.update(after_submit(result["unbound_sampled"], d.submit_s))
    if result["pods_per_s_after_submit"]:
        result["ratio_after_submit_to_raw"] = round(
            result["pods_per_s_after_submit"] / raw["binds_per_s"], 3
        )
    result["ratio_scheduler_to_raw"] = round(result["placements_per_s"] / raw["binds_per_s"], 3)
    result["ok"] = (
        b.unbound == 0
        and checks["over"] == 0
        and set(b.bind_counts) == {1}
        and checks["alloc_mismatch"] == 0
        and not checks["affinity_violations"]
    )
    return result


def after_submit(samples: list[list[float]], submit_s: float) -> dict[str, Any]:
    """From the sampled unbound counts: the backlog when the submission ended and the net rate
    at which it then fell to (nearly) nothing, production arrivals not added back."""
    tail = [(t, u) for t, u in samples if t >= submit_s]
    if len(tail) < 2:
        return {"backlog_at_submit_end": None, "pods_per_s_after_submit": None}
    t0, u0 = tail[0]
    t1, u1 = next(((t, u) for t, u in tail if u < 100), tail[-1])
    rate = (u0 - u1) / (t1 - t0) if t1 > t0 else None
    return {
        "backlog_at_submit_end": int(u0),
        "pods_per_s_after_submit": round(rate, 1) if rate else None,
    }


SUMMARY_KEYS = (
    "placements_per_s",
    "placements_per_s_during_drain",
    "batch_drain_s",
    "prod_created_to_bound_p50_ms",
    "prod_created_to_bound_p99_ms",
    "prod_created_to_visible_p50_ms",
    "prod_created_to_visible_p99_ms",
    "stream_lag_after_bind_p50_ms",
    "stream_lag_after_bind_p99_ms",
    "scheduler_cpu_s",
    "scheduler_peak_rss_mib",
    "revisioner_cpu_s",
    "postgres_cpu_s",
    "submit_s",
    "scheduler_ready_s",
    "ratio_scheduler_to_raw",
    "backlog_at_submit_end",
    "pods_per_s_after_submit",
    "ratio_after_submit_to_raw",
)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--profile", choices=("burst", "affinity"), default="burst")
    ap.add_argument("--nodes", type=int, default=10_000)
    ap.add_argument(
        "--tasks",
        type=int,
        default=None,
        help="batch tasks (default 100,000 for burst, 20,000 for affinity)",
    )
    ap.add_argument("--prod-rate", type=float, default=50.0, help="production pods per second")
    ap.add_argument("--group-size", type=int, default=50, help="affinity: batch pods per group")
    ap.add_argument("--runs", type=int, default=None, help="default 3 (burst), 1 (affinity)")
    ap.add_argument("--timeout", type=float, default=1800, help="seconds allowed for a drain")
    ap.add_argument("--keep", action="store_true", help="keep each run's database")
    ap.add_argument(
        "--queued",
        action="store_true",
        help="write the batch job before the scheduler starts, so the drain is placement alone",
    )
    args = ap.parse_args()
    if args.tasks is None:
        args.tasks = 100_000 if args.profile == "burst" else 20_000
    if args.runs is None:
        args.runs = 3 if args.profile == "burst" else 1
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so everything gets stopped
    stack = Stack()
    procs = Procs()
    logdir = Path(stack.tmp) / "logs"
    print(f"logs: {logdir}", flush=True)
    runs: list[dict[str, Any]] = []
    try:
        for n in range(args.runs):
            r = one_run(stack, args, n, procs, logdir)
            runs.append(r)
            print(
                f"run {n}: {r['placements_per_s']:.0f} placements/s, drain {r['batch_drain_s']}s,"
                f" prod p50/p99 {r['prod_created_to_bound_p50_ms']}/"
                f"{r['prod_created_to_bound_p99_ms']} ms, raw {r['raw_bind_many']['binds_per_s']}"
                f" binds/s, sched cpu {r['scheduler_cpu_s']}s, ok={r['ok']}",
                flush=True,
            )
    finally:
        procs.stop_all()
        stack.close()
    summary: dict[str, Any] = {}
    for key in SUMMARY_KEYS:
        values = [r[key] for r in runs if isinstance(r.get(key), (int, float))]
        summary[key] = round(median(values), 3) if values else None
    summary["raw_binds_per_s"] = median([r["raw_bind_many"]["binds_per_s"] for r in runs])
    summary["all_ok"] = all(r["ok"] for r in runs)
    data = {
        "benchmark": "scheduler",
        "profile": args.profile,
        "machine": machine(),
        "parameters": {
            "nodes": args.nodes,
            "tasks": args.tasks,
            "prod_rate": args.prod_rate,
            "group_size": args.group_size if args.profile == "affinity" else None,
            "runs": args.runs,
            "queued": args.queued,
            "zones": len(ZONES),
            "node_allocatable": {"cpu": "32", "memory": "128Gi", "pods": "110"},
            "batch_pod": {
                "namespace": BATCH_NS,
                "priority": 100,
                "cpu": "100m",
                "memory": "256Mi",
            },
            "prod_pod": {
                "namespace": PROD_NS,
                "priority": 2000,
                "cpu": "500m",
                "memory": "1Gi",
                "pods_per_service": 10,
            },
            "scheduler_batch_size": BATCH_SIZE,
            "raw_in_flight": IN_FLIGHT,
            "submit_chunk": CHUNK,
        },
        "notes": [
            "bound time = pods.bound_at, set by the bind's UPDATE by the database clock "
            "(the bind commits right after); created = pods.creation_timestamp, same clock",
            "visible time = committed_at of the pod's first qm_revision_log entry with "
            "spec.nodeName: bound time plus the revision stream's lag, what a watcher sees",
            "bound_per_second counts binds by bound time; unbound_sampled polls the pods "
            "table once a second",
            "pods_per_s_after_submit: net fall of the unbound backlog from the end of the "
            "submission until fewer than 100 pods are unbound (production arrivals at "
            "prod_rate continue meanwhile)",
            "placements_per_s: every pod bound (batch and production) over the window from "
            "the first bind to the last, by bound time",
            "batch_drain_s: from the start of the submission to the last batch pod's bound time",
            "raw_bind_many: app.scheduler.binder.bind_many over precomputed round-robin "
            "decisions for fresh unbound pods, batches of 500, two connections in flight, same "
            "database after the scheduler stopped, revisioner still running",
            "cpu figures cover the drain (scheduler synced -> stream caught up); postgres_cpu_s "
            "sums the postmaster and all its children on this server",
        ],
        "summary_median": summary,
        "runs": runs,
    }
    path = write_result(f"scheduler-{args.profile}{'-queued' if args.queued else ''}", data)
    print(f"\n{args.profile}: {args.nodes} nodes, {args.tasks} tasks, {args.runs} run(s)")
    for key, value in summary.items():
        per_run = [r.get(key) for r in runs] if key in SUMMARY_KEYS else ""
        print(f"  {key:36} {value!s:>12}  {per_run}")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
