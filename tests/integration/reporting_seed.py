"""A small cluster written straight into a database, and reporting logins, for the reporting
views' tests.

Two teams' namespaces, two nodes, pods in every state the views tell apart, a Deployment with
two revisions, a Job, a quota, a blocking disruption budget, a Secret, and the writes an auditor
looks for (a rollout, an eviction during a drain, a node failure, a DBA's manual UPDATE), each
with the application context the triggers record (``qm.context``).
"""

from __future__ import annotations

import json
import secrets
import uuid
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg import sql

SECRET_VALUE = "hunter2-" + secrets.token_hex(6)
TEAM_LABEL = "quaymaster.io/team"


@dataclass
class Seed:
    """The uids of the objects the tests look up."""

    uids: dict[str, str] = field(default_factory=dict)


class Roles:
    """Login and group roles made for one database, dropped afterwards (roles are
    cluster-wide, and the session's server is shared)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.suffix = secrets.token_hex(3)
        self.made: list[str] = []

    def make(self, base: str, options: str, *namespaces: str) -> str:
        name = f"{base}_{self.suffix}"
        with psycopg.connect(self.url, autocommit=True) as db:
            db.execute(sql.SQL("CREATE ROLE {} " + options).format(sql.Identifier(name)))
            for ns in namespaces:
                db.execute(
                    "INSERT INTO reporting.namespace_access (role_name, namespace) VALUES (%s, %s)",
                    (name, ns),
                )
        self.made.append(name)
        return name

    def drop(self) -> None:
        with psycopg.connect(self.url, autocommit=True) as db:
            for name in reversed(self.made):
                ident = sql.Identifier(name)
                db.execute("DELETE FROM reporting.namespace_access WHERE role_name = %s", (name,))
                db.execute(sql.SQL("DROP OWNED BY {}").format(ident))
                db.execute(sql.SQL("DROP ROLE {}").format(ident))


def _ready(status: bool) -> dict[str, Any]:
    return {"type": "Ready", "status": "True" if status else "False"}


def _pod_spec(node: str | None, cpu: str, memory: str) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": [
            {"name": "c", "image": "x", "resources": {"requests": {"cpu": cpu, "memory": memory}}}
        ]
    }
    if node:
        spec["nodeName"] = node
    return spec


def _context(db: psycopg.Connection, **ctx: str) -> None:
    db.execute("SELECT set_config('qm.context', %s, true)", (json.dumps(ctx),))


def _insert(db: psycopg.Connection, seed: Seed, table: str, key: str, **cols: Any) -> str:
    uid = str(uuid.uuid4())
    seed.uids[key] = uid
    names = ["uid", *cols]
    values = [uid, *(json.dumps(v) if isinstance(v, dict | list) else v for v in cols.values())]
    marks = ", ".join(["%s"] * len(values))
    db.execute(f"INSERT INTO {table} ({', '.join(names)}) VALUES ({marks})", values)
    return uid


def seed_cluster(url: str) -> Seed:
    seed = Seed()
    with psycopg.connect(url, autocommit=False) as db:
        _cluster(db, seed)
        db.commit()
        _workloads(db, seed)
        db.commit()
        _audited_writes(db, seed)
        db.commit()
    return seed


def _cluster(db: psycopg.Connection, seed: Seed) -> None:
    _context(db, principal="admin", reason="set up the teams", request_id="seed-1")
    _insert(db, seed, "namespaces", "ns-a", name="team-a", labels={TEAM_LABEL: "alpha"})
    _insert(db, seed, "namespaces", "ns-b", name="team-b")
    for name, zone, cpu in (("n1", "z1", "4"), ("n2", "z2", "8")):
        _insert(
            db, seed, "nodes", name, name=name,
            labels={"topology.kubernetes.io/zone": zone},
            status={"allocatable": {"cpu": cpu, "memory": "8Gi"}, "conditions": [_ready(True)]},
        )  # fmt: skip
    last_applied = json.dumps({"kind": "Secret", "stringData": {"password": SECRET_VALUE}})
    _insert(
        db, seed, "secrets", "secret", namespace="team-a", name="db-password",
        annotations={"kubectl.kubernetes.io/last-applied-configuration": last_applied},
        spec={"type": "Opaque", "stringData": {"password": SECRET_VALUE}},
    )  # fmt: skip


def _pod(db: psycopg.Connection, seed: Seed, key: str, ns: str, **kw: Any) -> None:
    owner = kw.pop("owner", None)
    cols: dict[str, Any] = {
        "namespace": ns,
        "name": key,
        "spec": _pod_spec(kw.pop("node", None), kw.pop("cpu", "100m"), kw.pop("memory", "64Mi")),
        "status": kw.pop("status", {"phase": "Pending"}),
    }
    if owner:
        cols["owner_references"] = [
            {"kind": owner[0], "name": owner[1], "uid": seed.uids[owner[1]]}
        ]
    _insert(db, seed, "pods", key, **cols)


RUNNING = {"phase": "Running", "conditions": [_ready(True)]}
UNSCHEDULABLE = {
    "phase": "Pending",
    "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                    "message": "0/2 nodes are available: 2 insufficient cpu"}],
}  # fmt: skip


def _workloads(db: psycopg.Connection, seed: Seed) -> None:
    _context(db, principal="carol", reason="first release", request_id="req-create")
    _insert(
        db, seed, "deployments", "web", namespace="team-a", name="web",
        spec={"replicas": 3, "template": {"spec": {"containers": [{"image": "web:1"}]}}},
        status={"observedGeneration": 1, "replicas": 2, "readyReplicas": 2,
                "updatedReplicas": 2, "availableReplicas": 2},
    )  # fmt: skip
    _insert(
        db, seed, "jobs", "batch", namespace="team-b", name="batch",
        spec={"completions": 2}, status={"active": 1, "succeeded": 1},
    )  # fmt: skip
    _insert(
        db, seed, "resourcequotas", "quota", namespace="team-a", name="compute",
        spec={"hard": {"requests.cpu": "2", "pods": "10"}},
        status={"used": {"requests.cpu": "750m", "pods": "3"}},
    )  # fmt: skip
    _insert(
        db, seed, "poddisruptionbudgets", "pdb", namespace="team-a", name="web",
        spec={"minAvailable": 2},
        status={"expectedPods": 2, "currentHealthy": 2, "desiredHealthy": 2,
                "disruptionsAllowed": 0},
    )  # fmt: skip
    db.commit()
    # The controller's ReplicaSet comes after the Deployment, as it does in a live cluster.
    _context(db, principal="system:controller:deployment", request_id="task-1")
    _insert(
        db, seed, "replicasets", "web-1", namespace="team-a", name="web-1",
        annotations={"deployment.kubernetes.io/revision": "1"},
        owner_references=[{"kind": "Deployment", "name": "web", "uid": seed.uids["web"]}],
        spec={"replicas": 2}, status={"replicas": 2, "readyReplicas": 2},
    )  # fmt: skip
    _pod(db, seed, "a1", "team-a", node="n1", cpu="500m", memory="1Gi", status=RUNNING,
         owner=("ReplicaSet", "web-1"))  # fmt: skip
    _pod(db, seed, "a2", "team-a", node="n1", cpu="250m", memory="512Mi", status=RUNNING,
         owner=("ReplicaSet", "web-1"))  # fmt: skip
    _pod(db, seed, "a3", "team-a", status=UNSCHEDULABLE)
    _pod(db, seed, "a4", "team-a", node="n1", cpu="2", status={"phase": "Succeeded"})
    _pod(db, seed, "a5", "team-a", node="n1", cpu="100m", status=RUNNING)
    _pod(db, seed, "b1", "team-b", node="n2", cpu="1", memory="2Gi", status=RUNNING,
         owner=("Job", "batch"))  # fmt: skip
    _pod(db, seed, "b2", "team-b")
    _pod(db, seed, "b3", "team-b", node="n2", cpu="200m")
    db.execute(
        "INSERT INTO events (uid, namespace, name, spec) VALUES (gen_random_uuid(), 'team-a',"
        " 'web.blocked', %s)",
        (json.dumps({"involvedObject": {"kind": "PodDisruptionBudget", "name": "web",
                                        "uid": seed.uids["pdb"]},
                     "reason": "EvictionBlocked", "type": "Warning", "count": 3,
                     "message": "Cannot evict pod as it would violate the budget",
                     "lastTimestamp": "2026-12-02T06:00:00Z"}),),
    )  # fmt: skip


DISRUPTION = {
    "type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI",
    "message": "Evicted while draining node n1",
}  # fmt: skip


def _audited_writes(db: psycopg.Connection, seed: Seed) -> None:
    # A rollout: the template changes, then the controller makes revision 2's ReplicaSet.
    _context(db, principal="alice", reason="roll out web:2", request_id="req-rollout")
    db.execute(
        "UPDATE deployments SET spec = jsonb_set(spec, '{template,spec,containers,0,image}',"
        " '\"web:2\"') WHERE name = 'web'"
    )
    db.commit()
    _context(db, principal="system:controller:deployment", request_id="task-2")
    _insert(
        db, seed, "replicasets", "web-2", namespace="team-a", name="web-2",
        annotations={"deployment.kubernetes.io/revision": "2"},
        owner_references=[{"kind": "Deployment", "name": "web", "uid": seed.uids["web"]}],
        spec={"replicas": 1}, status={"replicas": 0},
    )  # fmt: skip
    db.commit()
    # A drain evicts a5: the DisruptionTarget condition, then the deletion, in one transaction.
    _context(db, principal="bob", reason="kernel upgrade on n1", request_id="req-drain",
             verb="drain")  # fmt: skip
    db.execute("UPDATE nodes SET spec = '{\"unschedulable\": true}' WHERE name = 'n1'")
    db.execute(
        "UPDATE pods SET status = jsonb_set(status, '{conditions}',"
        " (status->'conditions') || %s::jsonb) WHERE name = 'a5'",
        (json.dumps([DISRUPTION]),),
    )
    db.execute("UPDATE pods SET deletion_timestamp = now() WHERE name = 'a5'")
    db.commit()
    _context(db, principal="system:node:n1", request_id="agent-1")
    db.execute("DELETE FROM pods WHERE name = 'a5'")
    db.commit()
    # Node n2 fails: its Ready condition goes Unknown (the node lifecycle controller).
    _context(db, principal="system:controller:node-lifecycle", request_id="tick-9")
    db.execute(
        "UPDATE nodes SET status = jsonb_set(status, '{conditions}', %s::jsonb) WHERE name = 'n2'",
        (json.dumps([{"type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown"}]),),
    )
    db.commit()
    # A DBA's manual UPDATE: no application context.
    db.execute("UPDATE jobs SET spec = jsonb_set(spec, '{completions}', '3') WHERE name = 'batch'")
    db.commit()
