"""The scheduler process end to end: real PostgreSQL, the real revisioner, real scheduler
processes.

Each test gets a database of its own (cloned from a migrated template), so the nodes it
creates are the whole cluster its schedulers see.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from app.core.scheduling.engine import cycle_seed
from app.devstack.supervise import free_port

ROOT = Path(__file__).resolve().parents[2]
NS = "team-a"


@pytest.fixture(scope="module")
def template(make_database: Any) -> str:
    return str(make_database("qm_sched_tpl").rsplit("/", 1)[1])


@dataclass
class Cluster:
    url: str
    db: psycopg.Connection[Any]
    procs: list[subprocess.Popen[bytes]]
    stop_stream: Callable[[], None]  # nothing new reaches the revision log after it

    def node(self, name: str, zone: str, cpu: str = "4", memory: str = "8Gi", **extra: Any) -> None:
        labels = {"topology.kubernetes.io/zone": zone, "kubernetes.io/hostname": name}
        labels.update(extra.pop("labels", {}))
        spec = extra.pop("spec", {})
        status = {
            "allocatable": {"cpu": cpu, "memory": memory, "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True"}],
        }
        self.db.execute(
            "INSERT INTO nodes (uid, name, labels, spec, status) VALUES (%s, %s, %s, %s, %s)",
            (uuid.uuid4(), name, json.dumps(labels), json.dumps(spec), json.dumps(status)),
        )

    def pods(
        self,
        names: list[str],
        cpu: str = "1",
        memory: str = "1Gi",
        priority: int = 0,
        labels: dict[str, str] | None = None,
        **spec_extra: Any,
    ) -> None:
        rows = []
        for name in names:
            spec = {
                "priority": priority,
                "terminationGracePeriodSeconds": 5,
                "containers": [
                    {
                        "name": "c",
                        "image": "busybox",
                        "resources": {"requests": {"cpu": cpu, "memory": memory}},
                    }
                ],
                **spec_extra,
            }
            rows.append((uuid.uuid4(), NS, name, json.dumps(labels or {}), json.dumps(spec)))
        with self.db.cursor() as cur:
            cur.executemany(
                "INSERT INTO pods (uid, namespace, name, labels, spec) VALUES (%s, %s, %s, %s, %s)",
                rows,
            )

    def start_scheduler(
        self, *args: str, log: Path | None = None
    ) -> tuple[subprocess.Popen[bytes], int]:
        port = free_port()
        out = open(log, "wb") if log is not None else None  # noqa: SIM115 - the child's
        proc = subprocess.Popen(
            [sys.executable, "-m", "app.scheduler", "--metrics-port", str(port), *args],
            cwd=ROOT,
            env={
                **os.environ,
                "DATABASE_URL": self.url,
                "QM_STREAM_DATABASE_URL": self.url,
                "QM_LOG_LEVEL": "info",
            },
            stderr=out,
        )
        if out is not None:
            out.close()
        self.procs.append(proc)
        return proc, port

    def bound(self) -> dict[str, str]:
        rows = self.db.execute(
            "SELECT name, node_name FROM pods WHERE node_name IS NOT NULL"
        ).fetchall()
        return {r[0]: r[1] for r in rows}

    def wait(self, predicate: Any, timeout: float = 60.0, what: str = "condition") -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate():
                return
            time.sleep(0.1)
        pods = self.db.execute(
            "SELECT name, node_name, phase, deletion_timestamp IS NOT NULL, status FROM pods"
            " ORDER BY name"
        ).fetchall()
        raise AssertionError(f"timed out waiting for {what}; pods: {pods}")

    def over_allocated(self) -> list[str]:
        rows = self.db.execute(
            """SELECT n.name FROM nodes n
               JOIN (SELECT node_name, sum(req_cpu_milli) cpu, sum(req_memory_bytes) mem
                       FROM pods WHERE node_name IS NOT NULL
                        AND coalesce(phase, '') NOT IN ('Succeeded', 'Failed')
                      GROUP BY node_name) p ON p.node_name = n.name
              WHERE p.cpu > n.alloc_cpu_milli OR p.mem > n.alloc_memory_bytes"""
        ).fetchall()
        return [r[0] for r in rows]

    def bind_transitions(self) -> dict[str, int]:
        """How many logged versions of each pod went from unbound to bound."""
        rows = self.db.execute(
            "SELECT name, revision, object->'spec'->>'nodeName' FROM qm_revision_log"
            " WHERE kind = 'Pod' ORDER BY name, revision"
        ).fetchall()
        counts: dict[str, int] = {}
        prev: dict[str, str | None] = {}
        for name, _rev, node in rows:
            if node and not prev.get(name):
                counts[name] = counts.get(name, 0) + 1
            prev[name] = node
        return counts


@pytest.fixture
def cluster(
    pg_server_url: str, template: str, revisioner_on: Any, stop_all: Any
) -> Iterator[Cluster]:
    name = f"qm_sched_{secrets.token_hex(3)}"
    with psycopg.connect(pg_server_url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
    url = pg_server_url.rsplit("/", 1)[0] + "/" + name
    with revisioner_on(url) as halt, psycopg.connect(url, autocommit=True) as db:
        c = Cluster(url, db, [], halt)
        try:
            yield c
        finally:
            stop_all(c.procs)


def metrics(port: int) -> str:
    """The scheduler's metrics ("" while its endpoint is not up yet)."""
    try:
        return httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    except httpx.TransportError:
        return ""


def samples(text: str, name: str) -> dict[str, float]:
    """The values of one single-label metric family, by label value."""
    out = {}
    for line in text.splitlines():
        if line.startswith(name + "{"):
            labels, value = line.rsplit(" ", 1)
            out[labels.split('"')[1]] = float(value)
    return out


def test_pending_pods_are_bound_spread_and_counted(cluster: Cluster) -> None:
    for i in range(6):
        cluster.node(f"node-{i}", f"zone-{i % 3}")
    _proc, port = cluster.start_scheduler()
    names = [f"web-{i}" for i in range(40)]
    cluster.pods(names, cpu="500m", memory="512Mi", priority=2000)
    cluster.wait(lambda: len(cluster.bound()) == 40, what="40 pods bound")
    bound = cluster.bound()
    assert cluster.over_allocated() == []
    # production pods are spread: every node got some
    assert len(set(bound.values())) == 6
    pod = cluster.db.execute("SELECT status FROM pods WHERE name = 'web-0'").fetchone()[0]  # type: ignore[index]
    assert {"type": "PodScheduled", "status": "True"}.items() <= pod["conditions"][0].items()
    text = metrics(port)
    assert 'scheduler_schedule_attempts_total{result="scheduled"} 40' in text
    assert 'scheduler_pod_scheduling_seconds_count{band="production"} 40' in text
    assert "scheduler_is_leader 1" in text
    assert cluster.bind_transitions() == {n: 1 for n in names}


def test_a_pod_that_fits_nowhere_says_why(cluster: Cluster) -> None:
    cluster.node("small-0", "zone-0", cpu="2")
    cluster.node("small-1", "zone-1", cpu="2")
    cluster.node("gpu-0", "zone-2", cpu="2", spec={"taints": [
        {"key": "gpu", "value": "true", "effect": "NoSchedule"}]})  # fmt: skip
    _proc, port = cluster.start_scheduler()
    cluster.pods(["huge"], cpu="3")
    expected = "0/3 nodes available: 3 insufficient cpu, 1 untolerated taint gpu=true:NoSchedule"

    def condition() -> Any:
        status = cluster.db.execute("SELECT status FROM pods WHERE name = 'huge'").fetchone()[0]  # type: ignore[index]
        return next(
            (c for c in status.get("conditions", []) if c.get("type") == "PodScheduled"), None
        )

    cluster.wait(lambda: condition() is not None, what="PodScheduled=False")
    cond = condition()
    assert cond["status"] == "False"
    assert cond["reason"] == "Unschedulable"
    assert cond["message"] == expected

    def event() -> Any:
        return cluster.db.execute(
            "SELECT spec FROM events WHERE involved_name = 'huge' AND reason = 'FailedScheduling'"
        ).fetchone()

    cluster.wait(lambda: event() is not None, what="a FailedScheduling event")
    assert event()[0]["message"] == expected
    # every failed attempt counted once under each of its two reasons, and under no other
    text = metrics(port)
    counts = samples(text, "scheduler_unschedulable_total")
    attempts = samples(text, "scheduler_schedule_attempts_total").get("unschedulable", 0)
    assert attempts >= 1
    assert counts["insufficient_cpu"] == counts["untolerated_taint"] == attempts
    assert {k for k, v in counts.items() if v} == {"insufficient_cpu", "untolerated_taint"}
    assert counts["node_selector"] == 0  # every reason is a series, at 0 until it happens
    # a node that could help arrives: the pod is retried and placed
    cluster.node("big-0", "zone-0", cpu="8")
    cluster.wait(lambda: cluster.bound().get("huge") == "big-0", what="huge bound to big-0")


def test_each_deciding_cycle_logs_the_seed_that_replays_it(
    cluster: Cluster, tmp_path: Path
) -> None:
    """The base seed is logged at info; each deciding cycle logs its number, its seed (derived
    from the base and the number) and the revision its snapshot had reached."""
    cluster.node("node-0", "zone-0")
    log = tmp_path / "scheduler.log"
    cluster.start_scheduler("--seed", "42", "--log-level", "debug", log=log)
    cluster.pods(["web-0"], cpu="100m", priority=2000)
    cluster.wait(lambda: "web-0" in cluster.bound(), what="web-0 bound")
    pattern = re.compile(r"cycle (\d+) seed (\d+) at revision (\d+): (\d+) placed")

    def cycles() -> list[tuple[int, int, int, int]]:
        found = (pattern.search(line) for line in log.read_text().splitlines())
        return [(int(m[1]), int(m[2]), int(m[3]), int(m[4])) for m in found if m]

    cluster.wait(lambda: any(placed for *_, placed in cycles()), what="a logged cycle")
    text = log.read_text()
    assert "random base seed 42" in text
    for number, seed, revision, _placed in cycles():
        assert seed == cycle_seed(42, number)
        assert revision > 0


def test_production_preempts_batch_and_the_node_is_held_for_it(cluster: Cluster) -> None:
    cluster.node("only", "zone-0", cpu="4", memory="8Gi")
    cluster.start_scheduler()
    cluster.pods([f"batch-{i}" for i in range(4)], cpu="1", priority=100)
    cluster.wait(lambda: len(cluster.bound()) == 4, what="batch bound")
    cluster.pods(["prod"], cpu="2", priority=5000)

    def terminating() -> list[str]:
        rows = cluster.db.execute(
            "SELECT name FROM pods WHERE deletion_timestamp IS NOT NULL ORDER BY name"
        ).fetchall()
        return [r[0] for r in rows]

    cluster.wait(lambda: len(terminating()) == 2, what="two victims terminating")
    nominated = cluster.db.execute(
        "SELECT status->>'nominatedNodeName' FROM pods WHERE name = 'prod'"
    ).fetchone()[0]  # type: ignore[index]
    assert nominated == "only"
    # While the victims terminate, a new batch pod must not take the held room.
    cluster.pods(["batch-late"], cpu="1", priority=100)
    time.sleep(1.5)
    assert "batch-late" not in cluster.bound()
    # The node agent would confirm the victims' end; do it by hand.
    cluster.db.execute("DELETE FROM pods WHERE deletion_timestamp IS NOT NULL")
    cluster.wait(lambda: cluster.bound().get("prod") == "only", what="prod bound")
    assert cluster.over_allocated() == []


def test_two_schedulers_racing_never_over_allocate(cluster: Cluster) -> None:
    for i in range(8):
        cluster.node(f"node-{i}", f"zone-{i % 3}", cpu="4", memory="16Gi")
    _a, port_a = cluster.start_scheduler("--no-leader-elect", "--batch-size", "16")
    _b, port_b = cluster.start_scheduler("--no-leader-elect", "--batch-size", "16")
    time.sleep(2.0)  # both synced
    # 8 nodes x 4 cpu = 32 slots of 1 cpu; 48 pods ask for them
    cluster.pods([f"task-{i}" for i in range(48)], cpu="1", memory="1Gi")
    cluster.wait(lambda: len(cluster.bound()) == 32, what="the cluster filled")
    time.sleep(2.0)
    assert len(cluster.bound()) == 32
    assert cluster.over_allocated() == []
    assert all(n == 1 for n in cluster.bind_transitions().values())
    scheduled = 0
    for port in (port_a, port_b):
        for line in metrics(port).splitlines():
            if line.startswith('scheduler_schedule_attempts_total{result="scheduled"}'):
                scheduled += int(float(line.split()[-1]))
    assert scheduled == 32


@pytest.mark.slow
def test_the_standby_finishes_when_the_leader_dies_mid_burst(cluster: Cluster) -> None:
    for i in range(30):
        cluster.node(f"node-{i}", f"zone-{i % 3}", cpu="64", memory="256Gi")
    leader, port_a = cluster.start_scheduler("--identity", "sched-a", "--batch-size", "50")
    cluster.wait(lambda: "scheduler_is_leader 1" in metrics(port_a), what="a leads")
    _standby, port_b = cluster.start_scheduler("--identity", "sched-b", "--batch-size", "50")
    names = [f"job-{i}" for i in range(3000)]
    cluster.pods(names, cpu="100m", memory="64Mi", priority=10)
    cluster.wait(lambda: len(cluster.bound()) >= 300, what="the burst under way")
    leader.kill()  # SIGKILL: no lease release, no goodbye
    leader.wait()
    cluster.wait(lambda: len(cluster.bound()) == 3000, timeout=120, what="the standby finished")
    assert "scheduler_is_leader 1" in metrics(port_b)
    assert cluster.over_allocated() == []
    assert cluster.bind_transitions() == {n: 1 for n in names}


def test_production_pods_are_placed_even_when_the_stream_lags(cluster: Cluster) -> None:
    for i in range(3):
        cluster.node(f"node-{i}", f"zone-{i}")
    _proc, port = cluster.start_scheduler()
    cluster.wait(lambda: "scheduler_nodes 3" in metrics(port), what="the snapshot")
    cluster.stop_stream()
    cluster.pods(["prod-0", "prod-1"], cpu="500m", priority=2000)
    cluster.pods(["batch-0"], cpu="500m", priority=10)
    cluster.wait(lambda: {"prod-0", "prod-1"} <= cluster.bound().keys(), what="prod bound")
    time.sleep(1.0)
    # batch pods come only through the stream, which is stopped
    assert "batch-0" not in cluster.bound()
    latency = cluster.db.execute(
        "SELECT max(bound_at - creation_timestamp) FROM pods WHERE priority >= 1000"
    ).fetchone()[0]  # type: ignore[index]
    assert latency.total_seconds() < 5


def test_production_pods_are_bound_while_batch_binds_are_held_up(cluster: Cluster) -> None:
    """Batch binds in flight hold back only batch pods: with two batches' worth of binds
    waiting on row locks (the pipeline full), a production pod is still decided and bound."""
    for i in range(3):
        cluster.node(f"node-{i}", f"zone-{i}", cpu="32", memory="64Gi")
    batch = [f"batch-{i:02d}" for i in range(20)]
    cluster.pods(batch, cpu="100m", memory="64Mi", priority=10)
    waiting = (
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
        " AND application_name = 'quaymaster' AND wait_event_type = 'Lock'"
    )
    with psycopg.connect(cluster.url) as holder:  # its transaction stays open until the end
        holder.execute("SELECT 1 FROM pods WHERE priority < 1000 FOR UPDATE")
        cluster.start_scheduler("--batch-size", "5")
        cluster.wait(
            lambda: cluster.db.execute(waiting).fetchone()[0] >= 2,  # type: ignore[index]
            what="two batch binds waiting on the locks",
        )
        cluster.pods(["prod-0"], cpu="500m", priority=2000)
        cluster.wait(lambda: "prod-0" in cluster.bound(), timeout=30, what="prod-0 bound")
        assert set(cluster.bound()) == {"prod-0"}
    cluster.wait(lambda: len(cluster.bound()) == 21, what="the batch bound once released")
    assert cluster.over_allocated() == []
    assert cluster.bind_transitions() == {n: 1 for n in [*batch, "prod-0"]}


def test_each_bind_is_recorded_with_the_schedulers_cycle_and_the_node(cluster: Cluster) -> None:
    cluster.node("node-0", "zone-0")
    cluster.node("node-1", "zone-1")
    cluster.start_scheduler()
    names = [f"ctx-{i}" for i in range(4)]
    cluster.pods(names, cpu="500m", memory="512Mi")
    cluster.wait(lambda: len(cluster.bound()) == 4, what="4 pods bound")
    bound = cluster.bound()
    rows = cluster.db.execute(
        "SELECT name, principal, request_id, reason, verb, subresource FROM qm_history"
        " WHERE table_name = 'pods' AND op = 'update' AND after ? 'node_name'"
    ).fetchall()
    assert sorted(r[0] for r in rows) == names  # one bind each
    for name, principal, request_id, reason, verb, subresource in rows:
        assert (principal, verb, subresource) == ("system:kube-scheduler", "create", "binding")
        assert re.fullmatch(r".+:\d+", request_id), request_id  # scheduler identity:cycle
        assert reason == f"scheduled onto node {bound[name]}"
