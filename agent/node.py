"""Registration and node status: the agent's Node object, written through the API.

At start the agent creates its Node if missing (labels: zone, machine class, hostname) and
writes ``status.capacity``, ``status.allocatable``, ``nodeInfo`` and ``Ready=True``
(``AgentReady``): from then on the scheduler can place pods on it. Full status is cheap for one
node and expensive for ten thousand, so afterwards it is written only when it changes, when
the lease epoch moved (the node lifecycle controller declared the node unreachable and set
``Ready=Unknown``), or every 5 minutes; the heartbeat itself is the Lease.

The node's ``spec`` is the controllers' and operators' (taints, cordon): the agent never
writes it after creation, only adds its own labels if they are missing, and puts
``kubernetes.io/hostname`` back to the node's hostname (its name unless overridden) if it
differs (as kubelet reconciles its default labels), so a node an older agent labelled with
the machine's hostname is its own topology domain again at the next start. Every write is
conditional; a conflict re-reads the node and applies the change on top of what is there.
The status to write is a pure function of the node read, the machine and the time.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from agent.api import NODE, AgentApi
from agent.lease import format_micro
from agent.machine import Machine, Reserve
from app.core.errors import AlreadyExists, Conflict, NotFound

log = logging.getLogger(__name__)
ZONE_LABEL = "topology.kubernetes.io/zone"
CLASS_LABEL = "quaymaster.io/machine-class"
HOSTNAME_LABEL = "kubernetes.io/hostname"
READY_REASON = "AgentReady"
FULL_STATUS_EVERY = 300.0
CONFLICT_RETRIES = 5
Obj = dict[str, Any]


@dataclass(frozen=True)
class NodeConfig:
    name: str
    zone: str = ""
    machine_class: str = ""
    extra_labels: dict[str, str] = field(default_factory=dict)
    reserve: Reserve = field(default_factory=Reserve)
    address: str = ""  # the node's InternalIP, where the API server reaches its agent
    agent_port: int = 0  # the agent server's port (ADR 0019); 0 until it listens
    hostname: str = ""  # ``--hostname-override``; empty: the node's name

    @property
    def node_hostname(self) -> str:
        """The node's ``kubernetes.io/hostname`` label and ``Hostname`` address: its own name
        unless overridden, as kubelet does. Never the machine's hostname: several agents on
        one machine (``make up``'s three) must each be their own topology domain."""
        return self.hostname or self.name


def endpoint_status(cfg: NodeConfig) -> Obj:
    """``addresses`` and ``daemonEndpoints``: where the API server finds this node's agent."""
    if not cfg.agent_port:
        return {}
    addresses = [{"type": "Hostname", "address": cfg.node_hostname}]
    if cfg.address:
        addresses.insert(0, {"type": "InternalIP", "address": cfg.address})
    return {
        "addresses": addresses,
        "daemonEndpoints": {"agentEndpoint": {"Port": cfg.agent_port}},
    }


def labels_for(cfg: NodeConfig) -> dict[str, str]:
    labels = {**cfg.extra_labels, HOSTNAME_LABEL: cfg.node_hostname}
    if cfg.zone:
        labels[ZONE_LABEL] = cfg.zone
    if cfg.machine_class:
        labels[CLASS_LABEL] = cfg.machine_class
    return labels


def _ready(previous: Obj | None, now: float) -> Obj:
    stamp = format_micro(now)
    unchanged = previous is not None and previous.get("status") == "True"
    since = previous.get("lastTransitionTime") if unchanged and previous else None
    return {
        "type": "Ready",
        "status": "True",
        "reason": READY_REASON,
        "message": "the node agent is running and renewing its lease",
        "lastHeartbeatTime": stamp,
        "lastTransitionTime": since or stamp,
    }


def desired_status(
    current: Obj, machine: Machine, reserve: Reserve, now: float, endpoint: Obj | None = None
) -> Obj:
    """The status to write over ``current``: capacity, allocatable, nodeInfo and Ready=True
    (with a fresh heartbeat); other conditions (pressure, written by other parts) are kept."""
    conditions = [c for c in current.get("conditions") or [] if isinstance(c, dict)]
    previous = next((c for c in conditions if c.get("type") == "Ready"), None)
    others = [c for c in conditions if c.get("type") != "Ready"]
    return {
        **current,
        "capacity": machine.capacity.to_quantities(),
        "allocatable": machine.allocatable(reserve).to_quantities(),
        "nodeInfo": machine.node_info,
        "conditions": [*others, _ready(previous, now)],
        **(endpoint or {}),
    }


def _comparable(status: Obj) -> Obj:
    """``status`` without heartbeat times, which change on every write by design."""
    conditions = [
        {k: v for k, v in c.items() if k not in ("lastHeartbeatTime", "lastTransitionTime")}
        for c in status.get("conditions") or []
        if isinstance(c, dict)
    ]
    return {**status, "conditions": sorted(conditions, key=lambda c: str(c.get("type")))}


def status_changed(current: Obj, desired: Obj) -> bool:
    return _comparable(current) != _comparable(desired)


def write_due(changed: bool, forced: bool, last_write: float | None, now: float) -> bool:
    """Whether to write full status now (``now`` and ``last_write`` monotonic)."""
    if changed or forced or last_write is None:
        return True
    return now - last_write >= FULL_STATUS_EVERY


@dataclass
class NodeStatusWriter:
    """Registers the node and keeps its status; call ``sync()`` from the agent's loop."""

    api: AgentApi
    cfg: NodeConfig
    machine: Machine
    monotonic: Callable[[], float] = time.monotonic
    wall: Callable[[], float] = time.time
    last_write: float | None = None
    writes: int = 0
    _node: Obj | None = field(default=None, repr=False)

    def register(self) -> Obj:
        """Create the Node if missing, add missing labels, write full status."""
        try:
            node = self.api.get(NODE, None, self.cfg.name)
        except NotFound:
            node = self._create()
        self._node = self._ensure_labels(node)
        self.sync(force=True)
        assert self._node is not None
        return self._node

    def _create(self) -> Obj:
        body = {
            "metadata": {
                "name": self.cfg.name,
                "labels": labels_for(self.cfg),
            },
            "spec": {},
        }
        try:
            return self.api.create(NODE, None, body)
        except AlreadyExists:
            return self.api.get(NODE, None, self.cfg.name)

    def _ensure_labels(self, node: Obj) -> Obj:
        for _ in range(CONFLICT_RETRIES):
            meta = node.get("metadata") or {}
            have = meta.get("labels") or {}
            want = labels_for(self.cfg)
            missing = {k: v for k, v in want.items() if k not in have}
            if have.get(HOSTNAME_LABEL, want[HOSTNAME_LABEL]) != want[HOSTNAME_LABEL]:
                missing[HOSTNAME_LABEL] = want[HOSTNAME_LABEL]  # the node's identity: corrected
            if not missing:
                return node
            body = {**node, "metadata": {**meta, "labels": {**have, **missing}}}
            try:
                return self.api.replace(NODE, None, body)
            except Conflict:
                node = self.api.get(NODE, None, self.cfg.name)
        raise Conflict(f"node {self.cfg.name}: labels lost {CONFLICT_RETRIES} races in a row")

    def sync(self, force: bool = False) -> bool:
        """Write full status if it changed, if ``force`` (the lease epoch moved), or every
        5 minutes; whether a write happened. Raises ``Unreachable`` or ``StatusError``.

        Writes are rare, so each one re-reads the node first: what the controller wrote since
        (``Ready=Unknown``, taints) is the base, and Ready goes back to True on top of it."""
        now = self.monotonic()
        known = (self._node or {}).get("status") or {}
        endpoint = endpoint_status(self.cfg)
        desired = desired_status(known, self.machine, self.cfg.reserve, 0.0, endpoint)
        if not write_due(status_changed(known, desired), force, self.last_write, now):
            return False
        for _ in range(CONFLICT_RETRIES):
            node = self.api.get(NODE, None, self.cfg.name)
            current = node.get("status") or {}
            status = desired_status(current, self.machine, self.cfg.reserve, self.wall(), endpoint)
            try:
                self._node = self.api.replace(NODE, None, {**node, "status": status}, sub="status")
            except Conflict:
                continue
            self.last_write, self.writes = now, self.writes + 1
            return True
        raise Conflict(f"node {self.cfg.name}: status lost {CONFLICT_RETRIES} races in a row")
