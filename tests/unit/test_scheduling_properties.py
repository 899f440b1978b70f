"""Property tests of the scheduling engine.

A model of the cluster (nodes, pods, the binds in flight) drives :class:`Engine` through random
interleavings of cycles, bind outcomes, pod and node changes. The model plays the scheduler
process: it binds a placement only if the pod has not changed since the decision (as the
binder's row_version check does), records nominations and deletes victims after a
preemption, and echoes its own writes back as the revision stream would, sometimes late.

Checked throughout, from the model rather than from the engine's own bookkeeping:

(a) every placement fitted its node when it was decided: the requests of the pods holding
    room there (bound, or decided and still able to commit), plus the room held for other
    nominated pods, plus the pod itself stay within allocatable for a production pod and
    within batch-allocatable for a batch pod (gpus and the pod count within allocatable);
    hence, for a node whose capacity never changed, the requests of its pods never exceed
    max(allocatable, batch-allocatable);
(b) nothing is placed on a cordoned or not-ready node, or one with a NoSchedule/NoExecute
    taint the pod does not tolerate;
(c) a preemption never chooses a production-band victim, nor one of equal or higher priority
    than the preemptor, nor a pod that is not running on the chosen node;
(d) the snapshot's incremental arrays (used_*, low_*, held_*) equal a recomputation from
    scratch, and the pods it counts are exactly the ones the model says hold room.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from app.core.scheduling.engine import Engine, Failure, Placement
from app.core.scheduling.explain import explain, verdicts
from app.core.scheduling.filters import FilterCache, feasible
from app.core.scheduling.podinfo import HOSTNAME_KEY, ZONE_KEY, pod_info
from app.core.scheduling.snapshot import NO_POD_LIMIT, node_info

THRESHOLD = 1000
MI = 1024 * 1024
TERMINAL = ("Succeeded", "Failed")

TAINTS = [
    ("gpu", "true", "NoSchedule"),
    ("spot", "", "NoExecute"),
    ("slow", "x", "PreferNoSchedule"),
    ("dedicated", "team", "NoSchedule"),
]
# (key, operator, value, effect)
TOLERATIONS = [
    ("gpu", "Equal", "true", ""),
    ("spot", "Exists", "", ""),
    ("", "Exists", "", ""),
    ("dedicated", "Equal", "team", "NoExecute"),  # wrong effect: tolerates nothing here
    ("dedicated", "Equal", "team", "NoSchedule"),
    ("slow", "Exists", "", "PreferNoSchedule"),
]
PRIORITIES = [-5, 0, 10, 500, 999, 1000, 1001, 5000]


def tolerated(tol: tuple[str, str, str, str], taint: tuple[str, str, str]) -> bool:
    key, op, value, effect = tol
    t_key, t_value, t_effect = taint
    if effect and effect != t_effect:
        return False
    if key == "":
        return op == "Exists"
    return key == t_key and (op == "Exists" or value == t_value)


# -- the model ------------------------------------------------------------------------------
@dataclass
class MNode:
    name: str
    cpu: int  # millicores
    mem: int  # MiB
    gpu: int
    pods: int | None
    batch_cpu: int | None
    batch_mem: int | None
    taints: tuple[tuple[str, str, str], ...]
    cordoned: bool
    ready: bool
    zone: str
    rv: int = 1
    capacity_changed: bool = False

    def obj(self) -> dict[str, Any]:
        alloc: dict[str, Any] = {"cpu": f"{self.cpu}m", "memory": f"{self.mem}Mi"}
        if self.gpu:
            alloc["nvidia.com/gpu"] = str(self.gpu)
        if self.pods is not None:
            alloc["pods"] = str(self.pods)
        status: dict[str, Any] = {
            "allocatable": alloc,
            "conditions": [{"type": "Ready", "status": "True" if self.ready else "False"}],
        }
        batch: dict[str, str] = {}
        if self.batch_cpu is not None:
            batch["cpu"] = f"{self.batch_cpu}m"
        if self.batch_mem is not None:
            batch["memory"] = f"{self.batch_mem}Mi"
        if batch:
            status["batchAllocatable"] = batch
        spec: dict[str, Any] = {
            "taints": [{"key": k, "value": v, "effect": e} for k, v, e in self.taints]
        }
        if self.cordoned:
            spec["unschedulable"] = True
        labels = {HOSTNAME_KEY: self.name, ZONE_KEY: self.zone}
        return {
            "metadata": {"name": self.name, "uid": f"uid-{self.name}", "labels": labels},
            "spec": spec,
            "status": status,
        }

    def capacity(self) -> tuple[Any, ...]:
        return (self.cpu, self.mem, self.gpu, self.pods, self.batch_cpu, self.batch_mem)

    def limits(self, batch: bool) -> tuple[int, int]:
        """(millicores, bytes) a pod of this band is held to."""
        if not batch:
            return self.cpu, self.mem * MI
        cpu = self.cpu if self.batch_cpu is None else self.batch_cpu
        mem = self.mem if self.batch_mem is None else self.batch_mem
        return cpu, mem * MI


@dataclass
class MPod:
    uid: str
    cpu: int  # millicores
    mem: int  # MiB
    gpu: int
    priority: int
    tolerations: tuple[tuple[str, str, str, str], ...]
    never: bool
    owner: str | None
    port: int | None
    created: int
    rv: int = 1
    node: str | None = None  # bound to (in the store)
    sent_node: str | None = None  # the node in the last version the engine was sent
    phase: str = "Pending"
    deleting: bool = False
    nominated: str | None = None

    @property
    def batch(self) -> bool:
        return self.priority < THRESHOLD

    @property
    def holds_room(self) -> bool:
        return self.node is not None and self.phase not in TERMINAL

    @property
    def pending(self) -> bool:
        return self.node is None and not self.deleting and self.phase not in TERMINAL

    def obj(self) -> dict[str, Any]:
        meta: dict[str, Any] = {
            "name": self.uid,
            "namespace": f"ns{self.created % 2}",
            "uid": self.uid,
            "labels": {"app": self.owner or "none"},
            "creationTimestamp": f"2026-01-01T00:{self.created // 60 % 60:02d}:"
            f"{self.created % 60:02d}Z",
        }
        if self.owner:
            meta["ownerReferences"] = [{"uid": self.owner, "controller": True}]
        if self.deleting:
            meta["deletionTimestamp"] = "2026-01-02T00:00:00Z"
        container: dict[str, Any] = {
            "name": "c",
            "resources": {
                "requests": {
                    "cpu": f"{self.cpu}m",
                    "memory": f"{self.mem}Mi",
                    **({"nvidia.com/gpu": str(self.gpu)} if self.gpu else {}),
                }
            },
        }
        if self.port:
            container["ports"] = [{"containerPort": self.port, "hostPort": self.port}]
        spec: dict[str, Any] = {
            "priority": self.priority,
            "containers": [container],
            "tolerations": [
                {"key": k, "operator": op, "value": v, "effect": e}
                for k, op, v, e in self.tolerations
            ],
        }
        if self.never:
            spec["preemptionPolicy"] = "Never"
        status: dict[str, Any] = {"phase": self.phase}
        if self.node is not None:
            spec["nodeName"] = self.node
            status["startTime"] = "2026-01-01T01:00:00Z"
        if self.nominated is not None:
            status["nominatedNodeName"] = self.nominated
        return {"metadata": meta, "spec": spec, "status": status}


@dataclass
class InFlight:
    """A placement decided by the engine whose bind has not been answered yet."""

    placement: Placement
    rv: int  # the pod's version the decision was made from
    valid: bool = True  # False once the bind can no longer commit (pod or node changed)


nodes_st = st.builds(
    lambda cpu, mem, gpu, pods, bcpu, bmem, taints, cordoned, ready, zone: dict(
        cpu=cpu, mem=mem, gpu=gpu, pods=pods, batch_cpu=bcpu, batch_mem=bmem,
        taints=tuple(taints), cordoned=cordoned, ready=ready, zone=zone,
    ),
    st.sampled_from([1000, 2000, 4000, 8000]),
    st.sampled_from([1024, 2048, 4096, 8192]),
    st.sampled_from([0, 0, 1, 2]),
    st.sampled_from([None, None, 1, 2, 3, 5]),
    st.sampled_from([None, None, 500, 3000, 12000]),
    st.sampled_from([None, None, 512, 6144, 16384]),
    st.one_of(st.just([]), st.just([]), st.lists(st.sampled_from(TAINTS), max_size=2, unique=True)),
    st.sampled_from([False, False, False, False, False, True]),
    st.sampled_from([True, True, True, True, True, False]),
    st.sampled_from(["z0", "z1", "z2"]),
)  # fmt: skip

pods_st = st.builds(
    lambda cpu, mem, gpu, prio, tols, never, owner, port: dict(
        cpu=cpu, mem=mem, gpu=gpu, priority=prio, tolerations=tuple(tols), never=never,
        owner=owner, port=port,
    ),
    st.sampled_from([0, 100, 250, 500, 1000, 2000, 3000]),
    st.sampled_from([0, 128, 512, 1024, 4096]),
    st.sampled_from([0, 0, 0, 0, 1]),
    st.sampled_from(PRIORITIES),
    st.lists(st.sampled_from(TOLERATIONS), max_size=2, unique=True),
    st.sampled_from([False, False, False, True]),
    st.sampled_from([None, "rs-a", "rs-b"]),
    st.sampled_from([None, None, None, None, 8080]),
)  # fmt: skip


class Cluster:
    """The model and the engine under test, with the checks."""

    def __init__(self, seed: int) -> None:
        self.engine = Engine(rng=random.Random(seed))
        self.now = 0.0
        self.nodes: dict[str, MNode] = {}
        self.gone_nodes: list[str] = []
        self.pods: dict[str, MPod] = {}
        self.inflight: list[InFlight] = []
        self.counter = 0
        self.preemptions = 0

    # -- feeding the engine ---------------------------------------------------------------
    def send_node(self, n: MNode) -> None:
        self.engine.node_changed(node_info(n.obj(), n.rv), self.now)

    def send_pod(self, p: MPod) -> None:
        self.engine.pod_changed(pod_info(p.obj(), p.rv), self.now)
        p.sent_node = p.node

    def write_pod(self, p: MPod) -> None:
        """A write to the stored pod, seen at once by the engine."""
        p.rv += 1
        for f in self.inflight:
            if f.placement.pod.uid == p.uid:
                f.valid = False
        self.send_pod(p)

    def add_node(self, attrs: dict[str, Any], reuse: bool) -> None:
        if reuse and self.gone_nodes:
            name = self.gone_nodes.pop(0)
        else:
            name = f"n{len(self.nodes) + len(self.gone_nodes)}-{self.counter}"
            self.counter += 1
        n = MNode(name=name, **attrs)
        n.capacity_changed = reuse  # pods bound before the removal may count again
        self.nodes[name] = n
        self.send_node(n)

    def change_node(self, name: str, attrs: dict[str, Any]) -> None:
        n = self.nodes[name]
        before = n.capacity()
        for k, v in attrs.items():
            setattr(n, k, v)
        n.rv += 1
        if n.capacity() != before:
            n.capacity_changed = True
        self.send_node(n)

    def delete_node(self, name: str) -> None:
        for p in self.pods.values():
            if p.node != p.sent_node:
                self.send_pod(p)  # the stream catches up first
        self.engine.node_deleted(name, self.now)
        del self.nodes[name]
        self.gone_nodes.append(name)
        for f in self.inflight:
            if f.placement.node_name == name:
                f.valid = False

    def add_pod(self, attrs: dict[str, Any]) -> None:
        uid = f"p{self.counter}"
        self.counter += 1
        p = MPod(uid=uid, created=self.counter, **attrs)
        self.pods[uid] = p
        self.send_pod(p)

    def delete_pod(self, uid: str) -> None:
        del self.pods[uid]
        for f in self.inflight:
            if f.placement.pod.uid == uid:
                f.valid = False
        self.engine.pod_deleted(uid, self.now)

    def resolve(self, index: int, echo: bool) -> None:
        f = self.inflight.pop(index)
        p = self.pods.get(f.placement.pod.uid)
        if (
            f.valid
            and p is not None
            and p.rv == f.rv
            and p.node is None
            and f.placement.node_name in self.nodes
        ):
            p.node = f.placement.node_name
            p.phase = "Running"
            p.nominated = None
            p.rv += 1
            self.engine.bound(f.placement)
            if echo:
                self.send_pod(p)
        else:
            self.engine.lost(f.placement, self.now)

    # -- what the model says --------------------------------------------------------------
    def committed(self) -> dict[str, list[MPod]]:
        """Pods holding room on each existing node: bound ones and binds that may commit."""
        out: dict[str, list[MPod]] = {name: [] for name in self.nodes}
        for p in self.pods.values():
            if p.holds_room and p.node in out:
                out[p.node].append(p)
        for f in self.inflight:
            if f.valid:
                out[f.placement.node_name].append(self.pods[f.placement.pod.uid])
        return out

    # -- one cycle and its checks ---------------------------------------------------------
    def cycle(
        self, dt: float, max_pods: int, act: list[bool]
    ) -> tuple[list[Placement], list[Failure], list[Failure]]:
        """One cycle, checked; returns the placements, the failures and the preemptions the
        model carried out (recorded the nomination and started deleting the victims)."""
        self.now += dt
        snap = self.engine.snapshot
        held_before = {
            uid: (snap.node(slot).name, cpu, mem, gpu)
            for uid, (slot, cpu, mem, gpu) in snap.nominated.items()
        }
        placements, failures = self.engine.cycle(self.now, max_pods)
        # A hold that moved to another node during the cycle (its pod preempted elsewhere)
        # no longer holds room on the first node for the pods placed after the move.
        held_after = {uid: snap.node(held[0]).name for uid, held in snap.nominated.items()}
        held_before = {
            uid: h for uid, h in held_before.items() if held_after.get(uid, h[0]) == h[0]
        }
        committed = self.committed()
        placed_now: set[str] = set()
        for pl in placements:
            self.check_placement(pl, committed, held_before, placed_now)
            p = self.pods[pl.pod.uid]
            committed[pl.node_name].append(p)
            placed_now.add(p.uid)
            self.inflight.append(InFlight(pl, p.rv))
        acted = []
        for i, f in enumerate(failures):
            self.check_failure(f)
            if f.preemption is not None and act[i % len(act)]:
                acted.append(f)
                self.preemptions += 1
                p = self.pods[f.pod.uid]
                p.nominated = f.preemption.node_name
                self.write_pod(p)
                for v in f.preemption.victims:
                    victim = self.pods[v.uid]
                    victim.deleting = True
                    self.write_pod(victim)
        self.check_capacity(committed)
        return placements, failures, acted

    def check_placement(
        self,
        pl: Placement,
        committed: dict[str, list[MPod]],
        held_before: dict[str, tuple[str, int, int, int]],
        placed_now: set[str],
    ) -> None:
        p = self.pods[pl.pod.uid]
        n = self.nodes[pl.node_name]
        assert p.pending, f"{p.uid} is not pending"
        assert not any(f.valid and f.placement.pod.uid == p.uid for f in self.inflight), (
            f"{p.uid} placed twice"
        )
        assert p.uid not in placed_now
        # (b)
        assert n.ready, f"{p.uid} placed on not-ready {n.name}"
        assert not n.cordoned, f"{p.uid} placed on cordoned {n.name}"
        for t in n.taints:
            if t[2] in ("NoSchedule", "NoExecute"):
                assert any(tolerated(tol, t) for tol in p.tolerations), (
                    f"{p.uid} placed on {n.name} despite taint {t}"
                )
        # (a)
        others = committed[n.name]
        held = [
            h
            for uid, h in held_before.items()
            if h[0] == n.name and uid != p.uid and uid not in placed_now
        ]
        cpu_limit, mem_limit = n.limits(p.batch)
        cpu = sum(q.cpu for q in others) + sum(h[1] for h in held) + p.cpu
        mem = sum(q.mem * MI for q in others) + sum(h[2] for h in held) + p.mem * MI
        gpu = sum(q.gpu for q in others) + sum(h[3] for h in held) + p.gpu
        count = len(others) + len(held) + 1
        assert cpu <= cpu_limit, f"{p.uid} overcommits cpu on {n.name}: {cpu} > {cpu_limit}"
        assert mem <= mem_limit, f"{p.uid} overcommits memory on {n.name}"
        assert gpu <= n.gpu, f"{p.uid} overcommits gpus on {n.name}"
        assert count <= (NO_POD_LIMIT if n.pods is None else n.pods), f"too many pods on {n.name}"
        if p.port is not None:
            assert all(q.port != p.port for q in others), f"host port conflict on {n.name}"

    def check_failure(self, f: Failure) -> None:
        # the explanation agrees with the decision: no node could take the pod
        assert f.message.startswith("0/"), f"{f.pod.uid} failed with {f.message!r}"
        assert bool(f.reasons) == (":" in f.message)
        plan = f.preemption
        if plan is None:
            return
        p = self.pods[f.pod.uid]
        assert not p.never
        assert plan.victims
        for v in plan.victims:
            victim = self.pods[v.uid]
            # (c)
            assert victim.priority < THRESHOLD, f"production-band victim {v.uid}"
            assert victim.priority < p.priority, f"victim {v.uid} not of lower priority"
            assert victim.holds_room and victim.node == plan.node_name
            assert not victim.deleting

    def check_capacity(self, committed: dict[str, list[MPod]]) -> None:
        for name, pods in committed.items():
            n = self.nodes[name]
            if n.capacity_changed:
                continue
            cpu = max(n.limits(False)[0], n.limits(True)[0])
            mem = max(n.limits(False)[1], n.limits(True)[1])
            assert sum(q.cpu for q in pods) <= cpu
            assert sum(q.mem * MI for q in pods) <= mem
            assert sum(q.gpu for q in pods) <= n.gpu
            assert len(pods) <= (NO_POD_LIMIT if n.pods is None else n.pods)

    # -- (d) ------------------------------------------------------------------------------
    def check_snapshot(self) -> None:
        snap = self.engine.snapshot
        cap = snap.cap
        used = {k: np.zeros(cap, dtype=np.int64) for k in ("cpu", "mem", "gpu", "pods")}
        low = {k: np.zeros(cap, dtype=np.int64) for k in ("cpu", "mem", "gpu", "pods")}
        held = {k: np.zeros(cap, dtype=np.int64) for k in ("cpu", "mem", "gpu", "pods")}
        for uid, slot in snap.placed.items():
            p = self.pods[uid]
            for arrs in (used, low) if p.batch else (used,):
                arrs["cpu"][slot] += p.cpu
                arrs["mem"][slot] += p.mem * MI
                arrs["gpu"][slot] += p.gpu
                arrs["pods"][slot] += 1
        for uid, (slot, cpu, mem, gpu) in snap.nominated.items():
            p = self.pods[uid]
            assert (cpu, mem, gpu) == (p.cpu, p.mem * MI, p.gpu)
            assert p.node is None and uid not in snap.placed, f"{uid} nominated but placed"
            assert snap.live[slot]
            held["cpu"][slot] += cpu
            held["mem"][slot] += mem
            held["gpu"][slot] += gpu
            held["pods"][slot] += 1
        for name, arrs in (("used", used), ("low", low), ("held", held)):
            for k, expected in arrs.items():
                actual = getattr(snap, f"{name}_{k}")
                assert np.array_equal(actual, expected), f"{name}_{k} drifted"

        expected_placed: dict[str, str] = {}
        for p in self.pods.values():
            if p.holds_room and p.node in self.nodes:
                expected_placed[p.uid] = p.node
        for f in self.inflight:
            if f.valid:
                expected_placed[f.placement.pod.uid] = f.placement.node_name
        actual_placed = {uid: snap.node(slot).name for uid, slot in snap.placed.items()}
        assert actual_placed == expected_placed
        unechoed = {p.uid for p in self.pods.values() if p.node is not None and p.sent_node is None}
        assert snap.assumed == {f.placement.pod.uid for f in self.inflight if f.valid} | unechoed
        # every pod waiting for a node is in the queue, or has a bind whose answer requeues it
        deciding = {f.placement.pod.uid for f in self.inflight}
        for p in self.pods.values():
            if p.pending and p.uid not in snap.assumed and p.uid not in deciding:
                assert p.uid in self.engine.queue, f"{p.uid} is pending but not queued"

    # -- at the end: nothing is forgotten -------------------------------------------------
    def settle(self) -> None:
        while self.inflight:
            self.resolve(0, echo=True)
        for p in self.pods.values():
            if p.node != p.sent_node:
                self.send_pod(p)
        self.check_snapshot()
        self.now += 1000.0
        placements, failures = self.engine.cycle(self.now, 100_000)
        decided = {pl.pod.uid for pl in placements} | {f.pod.uid for f in failures}
        pending = {p.uid for p in self.pods.values() if p.pending}
        assert pending <= decided, f"pods left behind by the queue: {sorted(pending - decided)}"
        committed = self.committed()
        placed_now: set[str] = set()
        for pl in placements:
            self.check_placement(pl, committed, {}, placed_now)
            committed[pl.node_name].append(self.pods[pl.pod.uid])
            placed_now.add(pl.pod.uid)


# -- random interleavings -------------------------------------------------------------------
NODE_FIELDS = ["cpu", "mem", "gpu", "pods", "batch_cpu", "batch_mem", "taints", "cordoned", "ready"]


class SchedulingMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.c = Cluster(0)

    @initialize(
        seed=st.integers(0, 2**16),
        nodes=st.lists(nodes_st, min_size=1, max_size=5),
        pods=st.lists(pods_st, max_size=12),
    )
    def start(self, seed: int, nodes: list[dict[str, Any]], pods: list[dict[str, Any]]) -> None:
        self.c = Cluster(seed)
        for attrs in nodes:
            self.c.add_node(attrs, reuse=False)
        for attrs in pods:
            self.c.add_pod(attrs)

    @rule(
        dt=st.sampled_from([0.0, 0.1, 0.5, 1.0, 2.0, 5.0, 30.0, 70.0]),
        max_pods=st.integers(1, 30),
        act=st.lists(st.booleans(), min_size=1, max_size=4),
    )
    def cycle(self, dt: float, max_pods: int, act: list[bool]) -> None:
        self.c.cycle(dt, max_pods, act)

    @rule(attrs=pods_st, copies=st.sampled_from([1, 1, 1, 4, 10]))
    def add_pods(self, attrs: dict[str, Any], copies: int) -> None:
        """A pod, or a burst of equal ones (the tasks of one job)."""
        for _ in range(copies):
            self.c.add_pod(attrs)

    @precondition(lambda self: self.c.inflight)
    @rule(
        index=st.integers(0, 10**6),
        count=st.sampled_from([1, 1, 2, 100]),
        echo=st.sampled_from([True, True, False]),
    )
    def answer_binds(self, index: int, count: int, echo: bool) -> None:
        for _ in range(min(count, len(self.c.inflight))):
            self.c.resolve(index % len(self.c.inflight), echo)

    @precondition(lambda self: any(p.node != p.sent_node for p in self.c.pods.values()))
    @rule(index=st.integers(0, 10**6))
    def echo(self, index: int) -> None:
        late = [p for p in self.c.pods.values() if p.node != p.sent_node]
        self.c.send_pod(late[index % len(late)])

    @precondition(lambda self: any(p.pending for p in self.c.pods.values()))
    @rule(index=st.integers(0, 10**6), deciding=st.booleans())
    def status_write(self, index: int, deciding: bool) -> None:
        """E.g. the PodScheduled=False condition: the pod changes, its requirements do not.
        Often it lands while a decision for the pod is being bound."""
        pending = [p for p in self.c.pods.values() if p.pending]
        if deciding:
            uids = {f.placement.pod.uid for f in self.c.inflight if f.valid}
            pending = [p for p in pending if p.uid in uids] or pending
        self.c.write_pod(pending[index % len(pending)])

    @precondition(lambda self: any(p.holds_room for p in self.c.pods.values()))
    @rule(index=st.integers(0, 10**6), phase=st.sampled_from(["Succeeded", "Failed"]))
    def finish(self, index: int, phase: str) -> None:
        running = [p for p in self.c.pods.values() if p.holds_room]
        p = running[index % len(running)]
        p.phase = phase
        self.c.write_pod(p)

    @precondition(lambda self: any(p.holds_room and not p.deleting for p in self.c.pods.values()))
    @rule(index=st.integers(0, 10**6))
    def start_deleting(self, index: int) -> None:
        running = [p for p in self.c.pods.values() if p.holds_room and not p.deleting]
        p = running[index % len(running)]
        p.deleting = True
        self.c.write_pod(p)

    @precondition(lambda self: self.c.pods)
    @rule(index=st.integers(0, 10**6), prefer_deleting=st.booleans())
    def delete_pod(self, index: int, prefer_deleting: bool) -> None:
        pool = [p for p in self.c.pods.values() if p.deleting] if prefer_deleting else []
        pool = pool or list(self.c.pods.values())
        self.c.delete_pod(pool[index % len(pool)].uid)

    @rule(attrs=nodes_st, reuse=st.booleans())
    def add_node(self, attrs: dict[str, Any], reuse: bool) -> None:
        if len(self.c.nodes) < 8:
            self.c.add_node(attrs, reuse)

    @precondition(lambda self: self.c.nodes)
    @rule(index=st.integers(0, 10**6), attrs=nodes_st, fields=st.sets(st.sampled_from(NODE_FIELDS)))
    def change_node(self, index: int, attrs: dict[str, Any], fields: set[str]) -> None:
        names = sorted(self.c.nodes)
        self.c.change_node(names[index % len(names)], {k: attrs[k] for k in fields})

    @precondition(lambda self: len(self.c.nodes) > 1)
    @rule(index=st.integers(0, 10**6))
    def delete_node(self, index: int) -> None:
        names = sorted(self.c.nodes)
        self.c.delete_node(names[index % len(names)])

    @invariant()
    def snapshot_matches(self) -> None:
        self.c.check_snapshot()

    def teardown(self) -> None:
        if self.c.nodes:
            self.c.settle()


TestSchedulingInterleavings = SchedulingMachine.TestCase
TestSchedulingInterleavings.settings = settings(
    max_examples=100,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


# -- one big cycle --------------------------------------------------------------------------
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 2**16),
    nodes=st.lists(nodes_st, min_size=1, max_size=12),
    pods=st.lists(pods_st, min_size=1, max_size=60),
    bound_first=st.integers(0, 60),
)
def test_one_big_cycle(
    seed: int, nodes: list[dict[str, Any]], pods: list[dict[str, Any]], bound_first: int
) -> None:
    """Many pods of few requirement classes decided in one cycle (the engine reuses its
    feasibility work across a class): every placement fits, nothing lands where it must not,
    and every preemption is lawful."""
    c = Cluster(seed)
    for attrs in nodes:
        c.add_node(attrs, reuse=False)
    for attrs in pods[:bound_first]:
        c.add_pod(attrs)
    c.cycle(0.0, 1000, [True])
    while c.inflight:
        c.resolve(0, echo=True)
    c.check_snapshot()
    for attrs in pods[bound_first:]:
        c.add_pod(attrs)
    c.cycle(0.0, 1000, [True, False])
    c.check_snapshot()
    c.settle()


def first_untolerated(n: MNode, p: MPod) -> str | None:
    """The model's word for the first hard taint of ``n`` that ``p`` does not tolerate."""
    for t in n.taints:
        if t[2] in ("NoSchedule", "NoExecute") and not any(tolerated(x, t) for x in p.tolerations):
            return (
                f"untolerated taint {t[0]}={t[1]}:{t[2]}"
                if t[1]
                else f"untolerated taint {t[0]}:{t[2]}"
            )
    return None


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 2**16),
    nodes=st.lists(nodes_st, min_size=1, max_size=8),
    placed=st.lists(pods_st, max_size=30),
    candidate=pods_st,
)
def test_explain_and_feasible_agree(
    seed: int, nodes: list[dict[str, Any]], placed: list[dict[str, Any]], candidate: dict[str, Any]
) -> None:
    """Over random clusters (pods placed by the engine, some of them nominated after a
    preemption), for a new pod: the nodes feasible() returns, through the engine's warm cache,
    are exactly the live nodes that no verdict of any filter turns away, computed afresh;
    explain() says as many are available, reports a reason code exactly when it counts a
    node under it, and counts cordoned, not-ready and untainted nodes as the model does."""
    c = Cluster(seed)
    for attrs in nodes:
        c.add_node(attrs, reuse=False)
    for attrs in placed:
        c.add_pod(attrs)
    c.cycle(0.0, 1000, [True, False])
    c.add_pod(candidate)
    p = c.pods[f"p{c.counter - 1}"]
    snap = c.engine.snapshot
    info = snap.pods[p.uid]
    passes_all = snap.live.copy()
    for _f, _reason, passed in verdicts(snap, info, FilterCache()):
        passes_all &= passed
    assert np.array_equal(feasible(snap, info, c.engine.cache) & snap.live, passes_all)
    why = explain(snap, info, c.engine.cache)
    assert (why.available, why.total) == (int(passes_all.sum()), len(c.nodes))
    counts = dict(why.counts)
    assert counts.get("node(s) cordoned", 0) == sum(n.cordoned for n in c.nodes.values())
    assert counts.get("node(s) not ready", 0) == sum(
        not n.ready and not n.cordoned for n in c.nodes.values()
    )
    expected_taints: dict[str, int] = {}
    for n in c.nodes.values():
        word = first_untolerated(n, p)
        if word is not None:
            expected_taints[word] = expected_taints.get(word, 0) + 1
    assert {k: v for k, v in counts.items() if k.startswith("untolerated")} == expected_taints
    by_code = {"cordoned": "node(s) cordoned", "insufficient_cpu": "insufficient cpu"}
    for code, text in by_code.items():
        assert (code in why.codes) == (text in counts)
    assert bool(why.codes) == bool(why.counts)


usable_nodes_st = nodes_st.map(lambda n: {**n, "cordoned": False, "ready": True, "taints": ()})
batch_pods_st = pods_st.map(lambda p: {**p, "priority": p["priority"] % THRESHOLD})
preemptors_st = st.builds(
    lambda p, cpu, prio: {**p, "never": False, "cpu": cpu, "priority": prio},
    pods_st,
    st.sampled_from([1000, 2000, 3000]),
    st.sampled_from([10, 500, 999, 1000, 5000]),
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 2**16),
    nodes=st.lists(usable_nodes_st, min_size=1, max_size=4),
    filler=st.lists(batch_pods_st, min_size=4, max_size=40),
    preemptors=st.lists(preemptors_st, min_size=1, max_size=8),
    act=st.lists(st.booleans(), min_size=1, max_size=3),
)
def test_preemption_is_lawful_and_the_nominee_lands(
    seed: int,
    nodes: list[dict[str, Any]],
    filler: list[dict[str, Any]],
    preemptors: list[dict[str, Any]],
    act: list[bool],
) -> None:
    """Nodes filled with batch pods, then pods of every priority that may preempt. Victims
    are always batch pods of lower priority running on the chosen node (checked in each
    cycle); a nominee does not preempt again while its victims terminate; and in the cycle
    after its victims are gone the nominee is placed on its nominated node, unless another
    pod has been nominated there since."""
    c = Cluster(seed)
    for attrs in nodes:
        c.add_node(attrs, reuse=False)
    for attrs in filler:
        c.add_pod(attrs)
    c.cycle(0.0, 1000, [True])
    c.settle()
    for attrs in preemptors:
        c.add_pod(attrs)
    waiting: dict[str, tuple[str, int]] = {}  # nominee -> (node, step of its nomination)
    plans: list[tuple[int, str, str]] = []  # (step, node, preemptor)
    placed: dict[str, str] = {}  # every placement so far: pod -> node
    for step in range(8):
        victims_gone = step % 2 == 1
        if victims_gone:
            for uid in [p.uid for p in c.pods.values() if p.deleting]:
                c.delete_pod(uid)
        placements, failures, acted = c.cycle(1.0 if step == 0 else 100.0, 1000, act)
        placed.update({pl.pod.uid: pl.node_name for pl in placements})
        plans += [(step, f.preemption.node_name, f.pod.uid) for f in failures if f.preemption]
        if victims_gone:
            for uid, (where, nominated_at) in waiting.items():
                rivals = [u for t, n, u in plans if n == where and u != uid and t >= nominated_at]
                if not rivals:
                    # it may already have landed: batch-allocatable beyond allocatable, or a
                    # rival's hold that moved away, can make room before its victims are gone
                    assert placed.get(uid) == where, f"{uid} nominated to {where}, not placed"
            waiting = {}
        else:
            for f in failures:
                if f.pod.uid in waiting:
                    assert f.preemption is None, f"{f.pod.uid} preempted again"
        waiting.update({f.pod.uid: (f.preemption.node_name, step) for f in acted if f.preemption})
        while c.inflight:
            c.resolve(0, echo=True)
    c.settle()


# -- sequences the interleavings above turned up, kept as plain tests -----------------------
PLAIN_NODE: dict[str, Any] = dict(
    cpu=2000, mem=4096, gpu=0, pods=None, batch_cpu=None, batch_mem=None, taints=(),
    cordoned=False, ready=True, zone="z0",
)  # fmt: skip
PLAIN_POD: dict[str, Any] = dict(
    cpu=2000, mem=128, gpu=0, priority=2000, tolerations=(), never=False, owner=None, port=None
)


def test_a_stale_bind_losing_keeps_the_later_decision() -> None:
    c = Cluster(1)
    c.add_node(PLAIN_NODE, reuse=False)
    c.add_pod(PLAIN_POD)
    c.cycle(0.0, 10, [True])
    [first] = c.inflight
    c.write_pod(c.pods[first.placement.pod.uid])  # e.g. a condition write lands after it
    c.check_snapshot()
    c.cycle(0.1, 10, [True])  # decided again, from the new version
    assert [f.valid for f in c.inflight] == [False, True]
    c.resolve(0, echo=True)  # the bind of the first decision is stale and loses
    c.check_snapshot()  # the second decision still holds its room
    c.add_pod(PLAIN_POD)
    c.cycle(0.2, 10, [True])
    assert len(c.inflight) == 1  # the node is full: the new pod is not placed on it
    c.settle()


def test_a_pod_assumed_on_a_removed_node_is_not_counted_there_later() -> None:
    c = Cluster(0)
    c.add_node(PLAIN_NODE, reuse=False)
    c.add_pod({**PLAIN_POD, "cpu": 100})
    c.cycle(0.0, 10, [True])
    [decided] = c.inflight
    first = decided.placement.node_name
    c.add_node(PLAIN_NODE, reuse=False)
    c.delete_node(first)  # removed while the pod is only assumed there
    c.resolve(0, echo=True)  # so its bind loses
    c.cycle(10.0, 10, [True])  # and it is placed again, elsewhere
    [decided] = c.inflight
    second = decided.placement.node_name
    assert second != first
    c.resolve(0, echo=True)
    c.add_node(PLAIN_NODE, reuse=False)
    c.delete_node(second)  # the node it is bound to goes: it waits for that node
    c.add_node(PLAIN_NODE, reuse=True)  # the first node comes back
    c.check_snapshot()  # the pod is not counted on it
    c.add_node(PLAIN_NODE, reuse=True)  # its own node comes back
    c.check_snapshot()
    snap = c.engine.snapshot
    assert snap.placed == {decided.placement.pod.uid: snap.slot_of[second]}
    c.settle()


def test_a_bind_lost_with_its_node_keeps_a_later_decision_from_the_same_version() -> None:
    c = Cluster(0)
    c.add_node(PLAIN_NODE, reuse=False)
    c.add_pod({**PLAIN_POD, "cpu": 100})
    c.cycle(0.0, 10, [True])
    uid = c.inflight[0].placement.pod.uid
    c.write_pod(c.pods[uid])  # the first decision goes stale; the pod is queued again
    c.resolve(0, echo=True)  # its bind loses: the pod is also retried after a backoff
    c.cycle(0.0, 10, [True])  # decided again, from the new version
    [second] = c.inflight
    c.add_node(PLAIN_NODE, reuse=False)
    c.delete_node(second.placement.node_name)  # that node goes before the bind is answered
    c.cycle(10.0, 10, [True])  # the retry decides it a third time, from the same version
    [_, third] = c.inflight
    assert third.placement.pod is second.placement.pod
    c.resolve(0, echo=True)  # the second bind loses (its node is gone) ...
    c.check_snapshot()  # ... and the third decision still holds its room
    c.settle()
