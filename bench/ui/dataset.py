"""The web UI benchmark's cluster: nodes over zones, namespaces, Deployments with their
ReplicaSets, and pods owned by them, written straight into the tables (``bench.loaders``).

Deterministic for given sizes (seeded), so two runs list the same objects. Proportions:

* nodes: ``zones`` zones round robin; 2 % cordoned, 1 % not ready; 32 CPU, 128 Gi, 110 pods.
* pods: ``namespaces`` namespaces, ``deployments`` Deployments spread evenly over them, each
  with one ReplicaSet owning its pods (label ``app=<deployment>``); 90 % Running, 4 % Pending
  (unbound, ``PodScheduled=False``, reason Unschedulable), 4 % Succeeded, 2 % Failed; bound
  pods spread over the nodes; created within the last day.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg

from bench.loaders import NODE_COLUMNS, copy_in_chunks

ZONE_KEY = "topology.kubernetes.io/zone"
POD_COLUMNS = ("uid", "namespace", "name", "labels", "owner_references", "creation_timestamp",
               "spec", "status")  # fmt: skip
WORKLOAD_COLUMNS = ("uid", "namespace", "name", "labels", "owner_references", "spec", "status")
IMAGE = "registry.local/web@sha256:" + "c" * 64
NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)  # a fixed "now": runs list the same objects


@dataclass(frozen=True)
class Sizes:
    nodes: int
    pods: int
    zones: int = 10
    namespaces: int = 100
    deployments: int = 1000

    @property
    def per_deployment(self) -> int:
        return max(1, -(-self.pods // self.deployments))


def ns_name(i: int) -> str:
    return f"team-{i:03d}"


def node_name(i: int) -> str:
    return f"node-{i:05d}"


def deployment_of(sizes: Sizes, d: int) -> tuple[str, str]:
    """(namespace, name) of deployment ``d``."""
    return ns_name(d % sizes.namespaces), f"web-{d:04d}"


def _iso(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def nodes(sizes: Sizes) -> Iterator[tuple[Any, ...]]:
    rnd = random.Random(1)
    for i in range(sizes.nodes):
        name = node_name(i)
        roll = rnd.random()
        ready = roll >= 0.01
        spec = {"unschedulable": True} if 0.01 <= roll < 0.03 else {}
        status = {
            "allocatable": {"cpu": "32", "memory": "128Gi", "pods": "110"},
            "capacity": {"cpu": "32", "memory": "128Gi", "pods": "110"},
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True" if ready else "False",
                    "lastTransitionTime": _iso(NOW),
                }
            ],
        }
        labels = {ZONE_KEY: f"zone-{i % sizes.zones}", "kubernetes.io/hostname": name}
        yield (None, name, labels, spec, status)


def namespaces(sizes: Sizes) -> Iterator[tuple[Any, ...]]:
    for i in range(sizes.namespaces):
        yield (None, ns_name(i), {}, {}, {"phase": "Active"})


def _template(app: str) -> dict[str, Any]:
    return {
        "metadata": {"labels": {"app": app}},
        "spec": {"containers": [{"name": "web", "image": IMAGE,
                                 "resources": {"requests": {"cpu": "250m", "memory": "512Mi"}}}]},
    }  # fmt: skip


def workloads(
    sizes: Sizes, rs_uids: list[str], dep_uids: list[str]
) -> Iterator[tuple[str, tuple[Any, ...]]]:
    """("deployments" | "replicasets", row) for every Deployment and its ReplicaSet."""
    n = sizes.per_deployment
    for d in range(sizes.deployments):
        ns, name = deployment_of(sizes, d)
        sel = {"matchLabels": {"app": name}}
        status = {"replicas": n, "readyReplicas": n, "availableReplicas": n,
                  "updatedReplicas": n, "observedGeneration": 1}  # fmt: skip
        dep = {"replicas": n, "selector": sel, "template": _template(name)}
        yield "deployments", (dep_uids[d], ns, name, {"app": name}, [], dep, status)
        owner = [{"apiVersion": "quaymaster.io/v1", "kind": "Deployment", "name": name,
                  "uid": dep_uids[d], "controller": True}]  # fmt: skip
        rs = {"replicas": n, "selector": sel, "template": _template(name)}
        yield "replicasets", (rs_uids[d], ns, f"{name}-5d4f8", {"app": name}, owner, rs,
                              {"replicas": n, "readyReplicas": n})  # fmt: skip


def pods(sizes: Sizes, rs_uids: list[str]) -> Iterator[tuple[Any, ...]]:
    rnd = random.Random(2)
    per = sizes.per_deployment
    for i in range(sizes.pods):
        d = min(i // per, sizes.deployments - 1)
        ns, dep = deployment_of(sizes, d)
        created = NOW - timedelta(seconds=rnd.randrange(86_400))
        roll = rnd.random()
        phase = ("Pending" if roll < 0.04 else "Succeeded" if roll < 0.08
                 else "Failed" if roll < 0.10 else "Running")  # fmt: skip
        spec = dict(_template(dep)["spec"])
        spec["priority"] = 0
        if phase == "Pending":
            conds = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                      "lastTransitionTime": _iso(created),
                      "message": f"0/{sizes.nodes} nodes are available: "
                                 f"{sizes.nodes} Insufficient cpu."}]  # fmt: skip
        else:
            spec["nodeName"] = node_name(rnd.randrange(sizes.nodes))
            conds = [{"type": "PodScheduled", "status": "True",
                      "lastTransitionTime": _iso(created + timedelta(seconds=1))}]  # fmt: skip
        status = {"phase": phase, "conditions": conds}
        owner = [{"apiVersion": "quaymaster.io/v1", "kind": "ReplicaSet",
                  "name": f"{dep}-5d4f8", "uid": rs_uids[d], "controller": True}]  # fmt: skip
        yield (None, ns, f"{dep}-5d4f8-{i:06d}", {"app": dep, "tier": "web"}, owner,
               created, spec, status)  # fmt: skip


def load(db: psycopg.Connection[Any], sizes: Sizes) -> int:
    """Write the whole cluster; returns the number of objects written."""
    n = copy_in_chunks(db, "namespaces", ("uid", "name", "labels", "spec", "status"),
                       namespaces(sizes))  # fmt: skip
    n += copy_in_chunks(db, "nodes", NODE_COLUMNS, nodes(sizes))
    rs_uids = [str(uuid.uuid4()) for _ in range(sizes.deployments)]
    dep_uids = [str(uuid.uuid4()) for _ in range(sizes.deployments)]
    rows = list(workloads(sizes, rs_uids, dep_uids))
    for table in ("deployments", "replicasets"):
        n += copy_in_chunks(db, table, WORKLOAD_COLUMNS, (r for t, r in rows if t == table))
    n += copy_in_chunks(db, "pods", POD_COLUMNS, pods(sizes, rs_uids))
    return n
