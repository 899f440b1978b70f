"""The node lifecycle controller end to end: real PostgreSQL and revisioner, the controller
manager process with short timings from its environment and, where pods must be replaced, a
real Celery worker, the dispatcher and the real scheduler. The tests play the node agents:
a thread renews the leases of the nodes that are alive, with SQL, every half second.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from plane import NS, Plane, start_worker

from app.devstack.supervise import free_port

LEASES = "quaymaster-node-lease"
FAST = {
    "QM_NODE_UNREACHABLE_AFTER": "4",
    "QM_NODE_EVICT_AFTER": "4",
    "QM_NODE_LEASE_SECONDS": "4",
    "QM_NODE_AGENT_SELF_KILL": "2",
    "QM_NODE_EVICT_MARGIN": "1",
    "QM_MANAGER_LEASE": "3",
    "QM_MANAGER_RENEW": "1",
}


class Agents:
    """The node agents: renew the lease of every node in ``alive`` every half second."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.alive: set[str] = set()
        self.renew_time: dict[str, str] = {}  # a skewed clock writes what it likes
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Agents:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        with psycopg.connect(self.url, autocommit=True) as db:
            while not self._stop.is_set():
                for name in sorted(self.alive):
                    stamp = self.renew_time.get(name)
                    db.execute(
                        "UPDATE leases SET spec = spec || jsonb_build_object('renewTime',"
                        " coalesce(%s, to_char(now() AT TIME ZONE 'UTC',"
                        ' \'YYYY-MM-DD"T"HH24:MI:SS.US"Z"\'))) WHERE namespace = %s AND name = %s',
                        (stamp, LEASES, name),
                    )
                self._stop.wait(0.5)


def add_node(db: psycopg.Connection[Any], name: str, zone: str = "a") -> None:
    labels = {"topology.kubernetes.io/zone": zone, "kubernetes.io/hostname": name}
    status = {
        "allocatable": {"cpu": "8", "memory": "16Gi", "pods": "110"},
        "conditions": [{"type": "Ready", "status": "True", "reason": "AgentReady"}],
    }
    db.execute(
        "INSERT INTO nodes (uid, name, labels, spec, status) VALUES (%s, %s, %s, '{}', %s)",
        (uuid.uuid4(), name, json.dumps(labels), json.dumps(status)),
    )
    spec = {"holderIdentity": name, "leaseDurationSeconds": 4, "epoch": 0, "renewTime": None}
    db.execute(
        "INSERT INTO leases (uid, namespace, name, spec) VALUES (%s, %s, %s, %s)",
        (uuid.uuid4(), LEASES, name, json.dumps({k: v for k, v in spec.items() if v is not None})),
    )


def bind_pods(db: psycopg.Connection[Any], node: str, count: int, **extra: Any) -> list[str]:
    names = [f"{node}-pod{i}" for i in range(count)]
    for name in names:
        spec = {"nodeName": node, "containers": [{"name": "c", "image": "busybox"}], **extra}
        status = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
        db.execute(
            "INSERT INTO pods (uid, namespace, name, spec, status) VALUES (%s, %s, %s, %s, %s)",
            (uuid.uuid4(), NS, name, json.dumps(spec), json.dumps(status)),
        )
    return names


def node_row(db: psycopg.Connection[Any], name: str) -> tuple[list[str], str, dict[str, str]]:
    """The node's taint keys, its Ready status and its annotations."""
    spec, status, annotations = db.execute(
        "SELECT spec, status, annotations FROM nodes WHERE name = %s", (name,)
    ).fetchone()  # type: ignore[misc]
    taints = [t["key"] for t in spec.get("taints") or []]
    ready = next(c["status"] for c in status["conditions"] if c["type"] == "Ready")
    return taints, ready, annotations or {}


def tainted(db: psycopg.Connection[Any], name: str, key: str) -> bool:
    return key in node_row(db, name)[0]


def events(db: psycopg.Connection[Any], reason: str) -> list[tuple[str, str]]:
    rows = db.execute(
        "SELECT spec->'involvedObject'->>'name', spec->>'type' FROM events"
        " WHERE spec->>'reason' = %s",
        (reason,),
    ).fetchall()
    return [(r[0], r[1]) for r in rows]


def epoch(db: psycopg.Connection[Any], name: str) -> int:
    row = db.execute(
        "SELECT (spec->>'epoch')::int FROM leases WHERE namespace = %s AND name = %s",
        (LEASES, name),
    ).fetchone()
    return int(row[0])  # type: ignore[index]


def pods_on(db: psycopg.Connection[Any], node: str) -> list[str]:
    rows = db.execute("SELECT name FROM pods WHERE node_name = %s ORDER BY name", (node,))
    return [r[0] for r in rows.fetchall()]


def pod_ready_reasons(db: psycopg.Connection[Any], node: str) -> set[str | None]:
    rows = db.execute(
        "SELECT c->>'reason' FROM pods, jsonb_array_elements(status->'conditions') c"
        " WHERE node_name = %s AND c->>'type' = 'Ready'",
        (node,),
    ).fetchall()
    return {r[0] for r in rows}


@pytest.fixture
def agents(plane: Plane) -> Iterator[Agents]:
    plane.env.update(FAST)
    with Agents(plane.url) as a:
        yield a


def start_manager(plane: Plane, identity: str = "m1") -> None:
    plane.start("-m", "workers.manager", "--identity", identity)


def test_a_silent_nodes_pods_are_replaced_on_schedule(plane: Plane, agents: Agents) -> None:
    for n in ("n0", "n1", "n2"):
        add_node(plane.db, n)
    agents.alive |= {"n0", "n1", "n2"}
    # The machines' clocks run an age ahead: the renewTime they write proves nothing.
    agents.renew_time.update(dict.fromkeys(("n0", "n1", "n2"), "2099-01-01T00:00:00.000000Z"))
    start_worker(plane)
    plane.start("-m", "workers.dispatch")
    plane.start("-m", "app.scheduler", "--metrics-port", str(free_port()))
    start_manager(plane)
    uid = plane.replicaset("web", 9)
    plane.wait(lambda: len(pods_on(plane.db, "n0")) + len(pods_on(plane.db, "n1"))
               + len(pods_on(plane.db, "n2")) == 9, what="9 pods bound")  # fmt: skip
    victim = max(("n0", "n1", "n2"), key=lambda n: len(pods_on(plane.db, n)))
    doomed = set(pods_on(plane.db, victim))
    assert doomed
    agents.alive.discard(victim)
    silent_since = time.monotonic()

    plane.wait(lambda: tainted(plane.db, victim, "node.kubernetes.io/unreachable"),
               timeout=10, what="the unreachable taint")  # fmt: skip
    assert time.monotonic() - silent_since >= 3.4
    # The taint (spec) and Ready=Unknown (status) are two writes: the second may land later.
    plane.wait(lambda: node_row(plane.db, victim)[1] == "Unknown", timeout=3, what="Ready=Unknown")
    assert epoch(plane.db, victim) == 1
    plane.wait(lambda: pod_ready_reasons(plane.db, victim) == {"NodeUnreachable"},
               timeout=3, what="pods not ready")  # fmt: skip
    # The tick writes the pods' readiness before its Events, a statement later.
    plane.wait(lambda: (victim, "Warning") in events(plane.db, "NodeNotReady"),
               timeout=3, what="NodeNotReady event")  # fmt: skip

    while doomed <= set(plane.pods_of(uid)):
        assert time.monotonic() - silent_since < 14, "not evicted in time"
        time.sleep(0.05)
    evicted_after = time.monotonic() - silent_since
    assert evicted_after >= 7.4  # 4 s + 4 s after the last renewal seen, not before
    plane.wait(lambda: len(plane.pods_of(uid)) == 9 and not doomed & set(plane.pods_of(uid))
               and not pods_on(plane.db, victim) and len(pods_on(plane.db, "n0"))
               + len(pods_on(plane.db, "n1")) + len(pods_on(plane.db, "n2")) == 9,
               timeout=20, what="replacements bound elsewhere")  # fmt: skip
    audit = plane.db.execute(
        "SELECT count(*) FROM qm_history"
        " WHERE principal = 'system:controller:node-lifecycle-controller'"
        " AND verb = 'delete' AND kind = 'Pod'"
    ).fetchone()
    assert audit is not None and audit[0] == len(doomed)


def test_a_zone_wide_silence_does_not_cause_mass_eviction(plane: Plane, agents: Agents) -> None:
    plane.env.update({"QM_NODE_UNREACHABLE_AFTER": "3", "QM_NODE_EVICT_AFTER": "3",
                      "QM_NODE_TRICKLE_PER_MINUTE": "6"})  # fmt: skip
    nodes = [f"e{i}" for i in range(10)]
    for n in nodes:
        add_node(plane.db, n, zone="east")
        bind_pods(plane.db, n, 1)
    agents.alive |= set(nodes)
    start_manager(plane)
    plane.wait(
        lambda: (
            plane.db.execute(
                "SELECT count(*) FROM leases WHERE name = 'quaymaster-controller-manager'"
            ).fetchone()[0]  # type: ignore[index]
            == 1
        ),
        what="a leader",
    )
    time.sleep(1.5)  # the leader has seen every lease
    silent = nodes[:5]
    agents.alive -= set(silent)
    start = time.monotonic()
    plane.wait(lambda: any(not pods_on(plane.db, n) for n in silent), timeout=12,
               what="a first eviction")  # fmt: skip
    first = time.monotonic()
    assert first - start >= 5.4
    time.sleep(15.0)
    window = time.monotonic() - first
    emptied = [n for n in silent if not pods_on(plane.db, n)]
    # One node at once, then one every 10 s: over 15 s at most 1 + 1.5 -> 2 nodes.
    assert 1 <= len(emptied) <= 1 + int(window / 10), (emptied, window)
    assert all(pods_on(plane.db, n) for n in nodes[5:])
    assert all(tainted(plane.db, n, "node.kubernetes.io/unreachable") for n in silent)
    warnings = events(plane.db, "ZoneDisruption")
    assert len(warnings) == 1 and warnings[0][0] in silent and warnings[0][1] == "Warning"


def test_a_node_returning_before_eviction_keeps_its_pods(plane: Plane, agents: Agents) -> None:
    for n in ("r0", "r1", "r2"):
        add_node(plane.db, n)
    pods = bind_pods(plane.db, "r0", 3)
    agents.alive |= {"r1", "r2"}  # r0 silent from the start
    start_manager(plane)
    plane.wait(lambda: tainted(plane.db, "r0", "node.kubernetes.io/unreachable"), timeout=15,
               what="the unreachable taint")  # fmt: skip
    plane.wait(lambda: pod_ready_reasons(plane.db, "r0") == {"NodeUnreachable"}, timeout=3)
    agents.alive.add("r0")
    plane.wait(lambda: not tainted(plane.db, "r0", "node.kubernetes.io/unreachable"),
               timeout=3, what="the taint lifted")  # fmt: skip
    plane.wait(lambda: node_row(plane.db, "r0")[1] == "True", timeout=3, what="Ready=True")
    plane.wait(lambda: ("r0", "Normal") in events(plane.db, "NodeReady"), timeout=3,
               what="the NodeReady event")  # fmt: skip
    time.sleep(6.0)  # past the eviction time
    assert pods_on(plane.db, "r0") == pods
    assert epoch(plane.db, "r0") == 1


def test_a_node_silent_three_times_stays_tainted(plane: Plane, agents: Agents) -> None:
    for n in ("f0", "f1", "f2"):
        add_node(plane.db, n)
    agents.alive |= {"f1", "f2"}
    start_manager(plane)
    for episode in range(3):
        plane.wait(lambda: tainted(plane.db, "f0", "node.kubernetes.io/unreachable"),
                   timeout=15, what=f"silence {episode + 1}")  # fmt: skip
        agents.alive.add("f0")
        plane.wait(lambda: not tainted(plane.db, "f0", "node.kubernetes.io/unreachable"),
                   timeout=3, what=f"return {episode + 1}")  # fmt: skip
        if episode < 2:
            assert not tainted(plane.db, "f0", "quaymaster.io/repair")
            agents.alive.discard("f0")
    time.sleep(2.0)
    taints, ready, annotations = node_row(plane.db, "f0")
    assert taints == ["quaymaster.io/repair"] and ready == "True"
    assert len(json.loads(annotations["quaymaster.io/silences"])) == 3
    assert events(plane.db, "NodeFlapping") == [("f0", "Warning")]
    assert epoch(plane.db, "f0") == 3
