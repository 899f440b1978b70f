"""The scheduler's in-memory view of the cluster, laid out for vectorised filtering.

Every node has a slot; per-node numbers (allocatable, batch-allocatable, requested, readiness)
live in numpy arrays indexed by slot, so checking one pod against 10,000 nodes is a handful of
array comparisons rather than 10,000 Python calls. Labels, taints and host ports change rarely:
masks derived from them are cached per *static epoch*, which moves only when a node is added,
removed, relabelled or retainted.

Pods that hold room are indexed by label so pod affinity, anti-affinity and topology spread
count matching pods per topology domain without scanning every pod.

The snapshot is fed by the revision stream (``upsert_node``, ``upsert_pod``, ``remove_*``) and
by the scheduler's own decisions (``assume`` / ``forget``) before they are committed, so pods
decided in one batch never double-book a node.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from app.core.errors import StatusError
from app.core.quantity import cpu_millis, to_bytes, to_int
from app.core.scheduling.podinfo import GPU, HOSTNAME_KEY, PodInfo

I64 = npt.NDArray[np.int64]
BOOL = npt.NDArray[np.bool_]
I32 = npt.NDArray[np.int32]
NO_POD_LIMIT = 1 << 40


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str
    effect: str

    def __str__(self) -> str:
        shown = f"{self.key}={self.value}" if self.value else self.key
        return f"{shown}:{self.effect}"


@dataclass(slots=True)
class NodeInfo:
    uid: str
    name: str
    row_version: int
    labels: dict[str, str]
    taints: tuple[Taint, ...]
    unschedulable: bool
    ready: bool
    cpu_milli: int | None
    memory_bytes: int | None
    gpu: int
    pods: int | None
    batch_cpu_milli: int | None
    batch_memory_bytes: int | None


def _quantity(table: dict[str, Any], key: str, parse: Any) -> int | None:
    if key not in table:
        return None
    try:
        return int(parse(table[key]))
    except (StatusError, ValueError, TypeError):
        return None


def node_info(obj: dict[str, Any], row_version: int) -> NodeInfo:
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    alloc = status.get("allocatable") or {}
    batch = status.get("batchAllocatable") or {}
    ready = any(
        isinstance(c, dict) and c.get("type") == "Ready" and c.get("status") == "True"
        for c in status.get("conditions") or []
    )
    taints = tuple(
        Taint(str(t.get("key", "")), str(t.get("value", "")), str(t.get("effect", "")))
        for t in spec.get("taints") or []
        if isinstance(t, dict)
    )
    return NodeInfo(
        uid=str(meta.get("uid", "")),
        name=str(meta.get("name", "")),
        row_version=row_version,
        labels=dict(meta.get("labels") or {}),
        taints=taints,
        unschedulable=bool(spec.get("unschedulable")),
        ready=ready,
        cpu_milli=_quantity(alloc, "cpu", cpu_millis),
        memory_bytes=_quantity(alloc, "memory", to_bytes),
        gpu=_quantity(alloc, GPU, to_int) or 0,
        pods=_quantity(alloc, "pods", to_int),
        batch_cpu_milli=_quantity(batch, "cpu", cpu_millis),
        batch_memory_bytes=_quantity(batch, "memory", to_bytes),
    )


class Snapshot:
    """Nodes and the pods that hold room on them."""

    def __init__(self, capacity: int = 1024) -> None:
        self.cap = 0
        self.nodes: list[NodeInfo | None] = []
        self.slot_of: dict[str, int] = {}  # node name -> slot
        self.free_slots: list[int] = []
        self.static_epoch = 0  # labels, taints, membership
        self.room_epoch = 0  # moves whenever room may have appeared anywhere
        self.version = 0  # moves on every change to room, placements or nodes
        self.pods: dict[str, PodInfo] = {}  # every known pod
        self.placed: dict[str, int] = {}  # uid -> slot, pods holding room (bound or assumed)
        self.assumed: set[str] = set()
        # uid -> (slot whose room is held for it, cpu, memory, gpus held)
        self.nominated: dict[str, tuple[int, int, int, int]] = {}
        self.by_label: dict[tuple[str, str], set[str]] = defaultdict(set)
        self.by_label_key: dict[str, set[str]] = defaultdict(set)
        self.by_owner: dict[str, set[str]] = defaultdict(set)
        self.slot_pods: dict[int, set[str]] = defaultdict(set)
        self.anti_by_label: dict[tuple[str, str], set[str]] = defaultdict(set)
        self.anti_unindexed: set[str] = set()
        self.port_users: dict[tuple[str, int], dict[int, int]] = defaultdict(dict)
        self.orphans: dict[str, set[str]] = defaultdict(set)  # node name -> pods bound to it
        self._domain_cache: dict[str, tuple[I32, list[str]]] = {}
        self._label_mask_cache: dict[tuple[str, str], BOOL] = {}
        self._key_mask_cache: dict[str, BOOL] = {}
        self._tainted: tuple[tuple[int, int], list[int]] | None = None
        self._grow(capacity)

    # -- arrays ------------------------------------------------------------------------------
    def _grow(self, capacity: int) -> None:
        old = self.cap
        self.cap = capacity

        def g(name: str, dtype: Any, fill: Any = 0) -> None:
            arr = np.full(capacity, fill, dtype=dtype)
            if old:
                arr[:old] = getattr(self, name)
            setattr(self, name, arr)

        for name in (
            "alloc_cpu", "alloc_mem", "alloc_gpu", "alloc_pods",
            "batch_cpu", "batch_mem",
            "used_cpu", "used_mem", "used_gpu", "used_pods",
            "held_cpu", "held_mem", "held_gpu", "held_pods",
            "low_cpu", "low_mem", "low_gpu", "low_pods",
        ):  # fmt: skip
            g(name, np.int64)
        g("live", np.bool_, False)
        g("ready", np.bool_, False)
        g("cordoned", np.bool_, False)
        g("schedulable", np.bool_, False)  # live, ready and not cordoned
        self.nodes.extend([None] * (capacity - old))
        self.free_slots.extend(range(capacity - 1, old - 1, -1))

    alloc_cpu: I64
    alloc_mem: I64
    alloc_gpu: I64
    alloc_pods: I64
    batch_cpu: I64
    batch_mem: I64
    used_cpu: I64
    used_mem: I64
    used_gpu: I64
    used_pods: I64
    held_cpu: I64
    held_mem: I64
    held_gpu: I64
    held_pods: I64
    # requests of placed pods below the production band: what preemption may free
    low_cpu: I64
    low_mem: I64
    low_gpu: I64
    low_pods: I64
    live: BOOL
    ready: BOOL
    cordoned: BOOL
    schedulable: BOOL

    @property
    def node_count(self) -> int:
        return len(self.slot_of)

    def node(self, slot: int) -> NodeInfo:
        n = self.nodes[slot]
        assert n is not None
        return n

    def iter_nodes(self) -> Iterator[tuple[int, NodeInfo]]:
        for name, slot in self.slot_of.items():
            del name
            yield slot, self.node(slot)

    # -- nodes -------------------------------------------------------------------------------
    def upsert_node(self, info: NodeInfo) -> None:
        self.version += 1
        slot = self.slot_of.get(info.name)
        old = self.nodes[slot] if slot is not None else None
        if slot is None:
            if not self.free_slots:
                self._grow(self.cap * 2)
            slot = self.free_slots.pop()
            self.slot_of[info.name] = slot
            self.live[slot] = True
            self.static_epoch += 1
            for uid in self.orphans.pop(info.name, set()):
                pod = self.pods.get(uid)
                if pod is not None and pod.holds_room and uid not in self.placed:
                    self._place(pod, slot)
        elif old is not None and (old.labels != info.labels or old.taints != info.taints):
            self.static_epoch += 1
        self.nodes[slot] = info
        self._static_changed_if(old, info)
        missing = info.cpu_milli is None or info.memory_bytes is None
        self.alloc_cpu[slot] = info.cpu_milli or 0
        self.alloc_mem[slot] = info.memory_bytes or 0
        self.alloc_gpu[slot] = info.gpu
        self.alloc_pods[slot] = NO_POD_LIMIT if info.pods is None else info.pods
        cpu_b = info.batch_cpu_milli
        mem_b = info.batch_memory_bytes
        self.batch_cpu[slot] = self.alloc_cpu[slot] if cpu_b is None else cpu_b
        self.batch_mem[slot] = self.alloc_mem[slot] if mem_b is None else mem_b
        self.ready[slot] = info.ready and not missing
        self.cordoned[slot] = info.unschedulable
        self.schedulable[slot] = bool(self.ready[slot]) and not info.unschedulable
        self.room_epoch += 1

    def _static_changed_if(self, old: NodeInfo | None, new: NodeInfo) -> None:
        if old is None or old.labels != new.labels or old.taints != new.taints:
            self._domain_cache.clear()
            self._label_mask_cache.clear()
            self._key_mask_cache.clear()

    def remove_node(self, name: str) -> None:
        self.version += 1
        slot = self.slot_of.pop(name, None)
        if slot is None:
            return
        self.nodes[slot] = None
        self.live[slot] = False
        self.ready[slot] = False
        self.schedulable[slot] = False
        for arr in (self.alloc_cpu, self.alloc_mem, self.alloc_gpu, self.alloc_pods):
            arr[slot] = 0
        for uid in list(self.slot_pods.get(slot, ())):
            pod = self.pods.get(uid)
            if pod is not None:
                self._unplace(pod)
                self.assumed.discard(uid)
                if pod.node_name == name:  # bound here; an assumed pod is not
                    self.orphans[name].add(uid)
        for uid, held in list(self.nominated.items()):
            if held[0] == slot:
                self._clear_nominated(uid)
        for arr in (
            self.used_cpu, self.used_mem, self.used_gpu, self.used_pods,
            self.low_cpu, self.low_mem, self.low_gpu, self.low_pods,
        ):  # fmt: skip
            arr[slot] = 0
        self.free_slots.append(slot)
        self.static_epoch += 1
        self._domain_cache.clear()
        self._label_mask_cache.clear()
        self._key_mask_cache.clear()

    # -- label-derived masks (cached per static epoch) ---------------------------------------
    def label_mask(self, key: str, value: str) -> BOOL:
        """Nodes whose label ``key`` equals ``value``."""
        cached = self._label_mask_cache.get((key, value))
        if cached is None:
            cached = np.zeros(self.cap, dtype=np.bool_)
            for slot, n in self.iter_nodes():
                if (n.name if key == "metadata.name" else n.labels.get(key)) == value:
                    cached[slot] = True
            self._label_mask_cache[(key, value)] = cached
        return cached

    def key_mask(self, key: str) -> BOOL:
        """Nodes that have label ``key``."""
        cached = self._key_mask_cache.get(key)
        if cached is None:
            cached = np.zeros(self.cap, dtype=np.bool_)
            for slot, n in self.iter_nodes():
                if key == "metadata.name" or key in n.labels:
                    cached[slot] = True
            self._key_mask_cache[key] = cached
        return cached

    def tainted(self) -> list[int]:
        """Slots of nodes with any taint (cached per static epoch)."""
        if self._tainted is None or self._tainted[0] != (self.static_epoch, self.cap):
            slots = [slot for slot, n in self.iter_nodes() if n.taints]
            self._tainted = ((self.static_epoch, self.cap), slots)
        return self._tainted[1]

    def soft_taint_mask(self) -> BOOL:
        """Nodes with a PreferNoSchedule taint (scored, not filtered)."""
        cached = self._key_mask_cache.get("\0soft-taints")
        if cached is None:
            cached = np.zeros(self.cap, dtype=np.bool_)
            for slot, n in self.iter_nodes():
                if any(t.effect == "PreferNoSchedule" for t in n.taints):
                    cached[slot] = True
            self._key_mask_cache["\0soft-taints"] = cached
        return cached

    def domains(self, topology_key: str) -> tuple[I32, list[str]]:
        """Per-slot domain ids for ``topology_key`` (-1: node lacks the key) and their names."""
        cached = self._domain_cache.get(topology_key)
        if cached is not None and len(cached[0]) == self.cap:
            return cached
        ids = np.full(self.cap, -1, dtype=np.int32)
        names: list[str] = []
        index: dict[str, int] = {}
        for slot, n in self.iter_nodes():
            if topology_key == HOSTNAME_KEY:
                value: str | None = n.labels.get(HOSTNAME_KEY, n.name)
            else:
                value = n.labels.get(topology_key)
            if value is None:
                continue
            if value not in index:
                index[value] = len(names)
                names.append(value)
            ids[slot] = index[value]
        self._domain_cache[topology_key] = (ids, names)
        return ids, names

    # -- pods --------------------------------------------------------------------------------
    def upsert_pod(self, pod: PodInfo) -> PodInfo | None:
        """Record the latest version of a pod; returns the previous one."""
        old = self.pods.get(pod.uid)
        self.pods[pod.uid] = pod
        was_assumed = pod.uid in self.assumed
        epoch = self.room_epoch
        same_place = (
            old is not None
            and pod.uid in self.placed
            and pod.holds_room
            and self.placed[pod.uid] == self.slot_of.get(pod.node_name or "")
            and old.req == pod.req
        )
        if old is not None:
            if pod.uid in self.placed:
                self._unplace(old)
            if old.node_name:
                _discard(self.orphans, old.node_name, pod.uid)
        if pod.holds_room:
            slot = self.slot_of.get(pod.node_name or "")
            if slot is not None:
                self._place(pod, slot)
            else:
                self.orphans[pod.node_name or ""].add(pod.uid)
        if was_assumed:
            self.assumed.discard(pod.uid)
        self._set_nominated(pod)
        if same_place:
            self.room_epoch = epoch  # a status write of a running pod frees no room
        return old

    def remove_pod(self, uid: str) -> PodInfo | None:
        old = self.pods.pop(uid, None)
        if old is not None and uid in self.placed:
            self._unplace(old)
        if old is not None and old.node_name:
            _discard(self.orphans, old.node_name, uid)
        self.assumed.discard(uid)
        self._clear_nominated(uid)
        return old

    def assume(self, pod: PodInfo, slot: int) -> None:
        """Count a decided, not yet committed placement."""
        self._clear_nominated(pod.uid)
        self._place(pod, slot)
        self.assumed.add(pod.uid)

    def forget(self, pod: PodInfo) -> None:
        """Undo :meth:`assume` for a placement that did not commit.

        Only the assumption made from this very version of the pod is undone: a newer version
        dropped that one, and any assumption now recorded belongs to a later decision."""
        if self.pods.get(pod.uid, pod) is not pod:
            return
        if pod.uid in self.assumed:
            self.assumed.discard(pod.uid)
            if pod.uid in self.placed:
                self._unplace(pod)

    def _place(self, pod: PodInfo, slot: int) -> None:
        self.version += 1
        r = pod.req
        self.used_cpu[slot] += r.cpu_milli
        self.used_mem[slot] += r.memory_bytes
        self.used_gpu[slot] += r.gpu
        self.used_pods[slot] += 1
        if r.batch:
            self.low_cpu[slot] += r.cpu_milli
            self.low_mem[slot] += r.memory_bytes
            self.low_gpu[slot] += r.gpu
            self.low_pods[slot] += 1
        self.placed[pod.uid] = slot
        self.slot_pods[slot].add(pod.uid)
        for kv in pod.labels.items():
            self.by_label[kv].add(pod.uid)
            self.by_label_key[kv[0]].add(pod.uid)
        if pod.owner_uid:
            self.by_owner[pod.owner_uid].add(pod.uid)
        for proto_port in r.host_ports:
            users = self.port_users[proto_port]
            users[slot] = users.get(slot, 0) + 1
        if r.anti_affinity:
            for term in r.anti_affinity:
                eq = [q for q in term.selector.requirements if q.op == "="]
                if eq and not term.selector.match_nothing:
                    self.anti_by_label[(eq[0].key, eq[0].values[0])].add(pod.uid)
                else:
                    self.anti_unindexed.add(pod.uid)

    def _unplace(self, pod: PodInfo) -> None:
        self.version += 1
        slot = self.placed.pop(pod.uid)
        r = pod.req
        self.used_cpu[slot] -= r.cpu_milli
        self.used_mem[slot] -= r.memory_bytes
        self.used_gpu[slot] -= r.gpu
        self.used_pods[slot] -= 1
        if r.batch:
            self.low_cpu[slot] -= r.cpu_milli
            self.low_mem[slot] -= r.memory_bytes
            self.low_gpu[slot] -= r.gpu
            self.low_pods[slot] -= 1
        members = self.slot_pods.get(slot)
        if members is not None:
            members.discard(pod.uid)
            if not members:
                del self.slot_pods[slot]
        for kv in pod.labels.items():
            _discard(self.by_label, kv, pod.uid)
            _discard(self.by_label_key, kv[0], pod.uid)
        if pod.owner_uid:
            _discard(self.by_owner, pod.owner_uid, pod.uid)
        for proto_port in r.host_ports:
            users = self.port_users.get(proto_port)
            if users is not None and slot in users:
                users[slot] -= 1
                if users[slot] <= 0:
                    del users[slot]
        for term in r.anti_affinity:
            eq = [q for q in term.selector.requirements if q.op == "="]
            if eq and not term.selector.match_nothing:
                _discard(self.anti_by_label, (eq[0].key, eq[0].values[0]), pod.uid)
        self.anti_unindexed.discard(pod.uid)
        self.room_epoch += 1

    # -- nominations: room held for a preemptor ----------------------------------------------
    def _set_nominated(self, pod: PodInfo) -> None:
        self._clear_nominated(pod.uid)
        if pod.nominated_node and pod.pending:
            slot = self.slot_of.get(pod.nominated_node)
            if slot is not None:
                self.nominate(pod, slot)

    def nominate(self, pod: PodInfo, slot: int) -> None:
        self.version += 1
        self._clear_nominated(pod.uid)
        r = pod.req
        self.held_cpu[slot] += r.cpu_milli
        self.held_mem[slot] += r.memory_bytes
        self.held_gpu[slot] += r.gpu
        self.held_pods[slot] += 1
        self.nominated[pod.uid] = (slot, r.cpu_milli, r.memory_bytes, r.gpu)

    def nominated_slot(self, uid: str) -> int | None:
        held = self.nominated.get(uid)
        return None if held is None else held[0]

    def _clear_nominated(self, uid: str) -> None:
        held = self.nominated.pop(uid, None)
        if held is None:
            return
        self.version += 1
        slot, cpu, mem, gpu = held
        self.held_cpu[slot] -= cpu
        self.held_mem[slot] -= mem
        self.held_gpu[slot] -= gpu
        self.held_pods[slot] -= 1
        self.room_epoch += 1

    # -- queries used by filters and scores --------------------------------------------------
    def matching_pods(self, selector_reqs: Any, namespaces: frozenset[str] | None) -> set[str]:
        """Uids of placed pods matching a selector (``PodTerm``/``SpreadConstraint``-style)."""
        sel = selector_reqs
        if sel.match_nothing:
            return set()
        eq = [q for q in sel.requirements if q.op == "="]
        candidates: Collection[str]
        if eq:
            sets = [self.by_label.get((q.key, q.values[0]), set()) for q in eq]
            candidates = min(sets, key=lambda m: len(m))
        else:
            keyed = [
                q for q in sel.requirements if q.op in ("in", "exists")
            ]  # both require the key to be present
            candidates = self.by_label_key.get(keyed[0].key, set()) if keyed else self.placed.keys()
        out = set()
        for uid in candidates:
            p = self.pods.get(uid)
            if p is None or uid not in self.placed:
                continue
            if namespaces is not None and p.namespace not in namespaces:
                continue
            if sel.matches(p.labels):
                out.add(uid)
        return out

    def slot_counts(self, uids: Iterable[str]) -> I64:
        """Number of ``uids`` placed on each slot."""
        slots = [self.placed[u] for u in uids if u in self.placed]
        if not slots:
            return np.zeros(self.cap, dtype=np.int64)
        return np.bincount(np.asarray(slots, dtype=np.int64), minlength=self.cap).astype(np.int64)


def _discard(index: dict[Any, set[str]], key: Any, uid: str) -> None:
    members = index.get(key)
    if members is not None:
        members.discard(uid)
        if not members:
            del index[key]
