"""What the scheduler needs to know about a pod, parsed once from its object.

A pod is parsed when it arrives from the revision stream, never again per attempt. Everything
that decides *where* a pod may go is gathered into :class:`Requirements`, a frozen, hashable
value: pods with equal requirements (the tasks of one job) form an equivalence class and share
filter work and failure explanations.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import msgspec

from app.core.errors import StatusError
from app.core.labels import Selector, from_label_selector
from app.core.priority import DEFAULT_PRIORITY, PRODUCTION_THRESHOLD
from app.core.quantity import cpu_millis, to_bytes

GPU = "nvidia.com/gpu"
HOSTNAME_KEY = "kubernetes.io/hostname"
ZONE_KEY = "topology.kubernetes.io/zone"
DEFAULT_GRACE_SECONDS = 30
TERMINAL_PHASES = ("Succeeded", "Failed")


@dataclass(frozen=True, slots=True)
class Toleration:
    key: str
    operator: str  # Equal | Exists
    value: str
    effect: str  # "" matches every effect

    def tolerates(self, key: str, value: str, effect: str) -> bool:
        if self.effect and self.effect != effect:
            return False
        if not self.key:
            return self.operator == "Exists"
        if self.key != key:
            return False
        return self.operator == "Exists" or self.value == value


@dataclass(frozen=True, slots=True)
class NodeRequirement:
    """One ``matchExpressions`` item of a node selector term."""

    key: str
    operator: str  # In NotIn Exists DoesNotExist Gt Lt
    values: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class NodeTerm:
    """A node selector term: the AND of its requirements (``matchFields`` on metadata.name
    is expressed as a requirement on the key ``metadata.name``)."""

    requirements: tuple[NodeRequirement, ...]
    weight: int = 0  # preferred terms only


@dataclass(frozen=True, slots=True)
class PodTerm:
    """A pod (anti-)affinity term: pods matched by ``selector`` in ``namespaces`` (None: all),
    counted per domain of ``topology_key``."""

    selector: Selector
    namespaces: frozenset[str] | None
    topology_key: str
    weight: int = 0  # preferred terms only

    def selects(self, namespace: str, labels: dict[str, str]) -> bool:
        if self.namespaces is not None and namespace not in self.namespaces:
            return False
        return self.selector.matches(labels)


@dataclass(frozen=True, slots=True)
class SpreadConstraint:
    max_skew: int
    topology_key: str
    hard: bool  # DoNotSchedule
    selector: Selector
    namespace: str


@dataclass(frozen=True, slots=True)
class Requirements:
    """Everything that decides where a pod may go; equal values share filter work."""

    namespace: str
    labels: tuple[tuple[str, str], ...]
    cpu_milli: int
    memory_bytes: int
    gpu: int
    batch: bool
    node_selector: tuple[tuple[str, str], ...]
    required_node_terms: tuple[NodeTerm, ...]  # OR of terms; empty = no constraint
    preferred_node_terms: tuple[NodeTerm, ...]
    tolerations: tuple[Toleration, ...]
    host_ports: tuple[tuple[str, int], ...]
    affinity: tuple[PodTerm, ...]
    anti_affinity: tuple[PodTerm, ...]
    preferred_affinity: tuple[PodTerm, ...]
    preferred_anti_affinity: tuple[PodTerm, ...]
    spread: tuple[SpreadConstraint, ...]

    @property
    def scarce(self) -> bool:
        """Scarce resources are searched over every node, not a sample."""
        return self.gpu > 0

    @property
    def has_pod_terms(self) -> bool:
        return bool(
            self.affinity
            or self.anti_affinity
            or self.preferred_affinity
            or self.preferred_anti_affinity
            or self.spread
        )


@dataclass(slots=True)
class PodInfo:
    uid: str
    namespace: str
    name: str
    row_version: int
    priority: int
    created: float  # seconds since the epoch
    labels: dict[str, str]
    owner_uid: str | None
    node_name: str | None
    phase: str
    deleting: bool
    nominated_node: str | None
    scheduler_name: str
    preempt_never: bool
    grace_seconds: int
    started: float  # when it was bound/started (for choosing victims); created if unknown
    req: Requirements
    scheduled_condition: tuple[str, str] | None = None  # (reason, message) of PodScheduled=False

    @property
    def holds_room(self) -> bool:
        return self.node_name is not None and self.phase not in TERMINAL_PHASES

    @property
    def pending(self) -> bool:
        return self.node_name is None and not self.deleting and self.phase not in TERMINAL_PHASES

    @property
    def production(self) -> bool:
        return not self.req.batch


def _time(value: Any) -> float:
    if not isinstance(value, str) or not value:
        return 0.0
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0


def _requests(spec: dict[str, Any]) -> tuple[int, int, int]:
    cpu = mem = gpu = 0
    for c in spec.get("containers") or []:
        if not isinstance(c, dict):
            continue
        req = (c.get("resources") or {}).get("requests") or {}
        try:
            cpu += cpu_millis(req["cpu"]) if "cpu" in req else 0
            mem += to_bytes(req["memory"]) if "memory" in req else 0
            gpu += to_bytes(req[GPU]) if GPU in req else 0
        except (StatusError, ValueError, TypeError):
            continue
    return cpu, mem, gpu


def _node_term(term: dict[str, Any], weight: int = 0) -> NodeTerm:
    reqs: list[NodeRequirement] = []
    for expr in term.get("matchExpressions") or []:
        reqs.append(
            NodeRequirement(
                str(expr.get("key", "")),
                str(expr.get("operator", "")),
                tuple(sorted(str(v) for v in expr.get("values") or [])),
            )
        )
    for expr in term.get("matchFields") or []:
        reqs.append(
            NodeRequirement(
                "metadata.name",
                str(expr.get("operator", "")),
                tuple(sorted(str(v) for v in expr.get("values") or [])),
            )
        )
    return NodeTerm(tuple(reqs), weight)


def _selector(obj: Any) -> Selector:
    try:
        return from_label_selector(obj)
    except StatusError:
        return Selector.nothing()


def _pod_term(term: dict[str, Any], namespace: str, weight: int = 0) -> PodTerm:
    namespaces = term.get("namespaces")
    if term.get("namespaceSelector") is not None:
        ns: frozenset[str] | None = None  # a namespace selector: treated as all namespaces
    elif namespaces:
        ns = frozenset(str(n) for n in namespaces)
    else:
        ns = frozenset((namespace,))
    return PodTerm(
        _selector(term.get("labelSelector")), ns, str(term.get("topologyKey", "")), weight
    )


def _pod_terms(
    aff: dict[str, Any], which: str, namespace: str
) -> tuple[tuple[PodTerm, ...], tuple[PodTerm, ...]]:
    block = aff.get(which) or {}
    required = tuple(
        _pod_term(t, namespace)
        for t in block.get("requiredDuringSchedulingIgnoredDuringExecution") or []
    )
    preferred = tuple(
        _pod_term(p.get("podAffinityTerm") or {}, namespace, int(p.get("weight", 1)))
        for p in block.get("preferredDuringSchedulingIgnoredDuringExecution") or []
    )
    return required, preferred


_SCHEDULING_FIELDS = (
    "nodeSelector", "affinity", "tolerations", "topologySpreadConstraints",
)  # fmt: skip
_encode = msgspec.json.Encoder(order="deterministic").encode
_interned: dict[bytes, Requirements] = {}


def requirements_of(
    obj: dict[str, Any], priority: int, threshold: int = PRODUCTION_THRESHOLD
) -> Requirements:
    """The scheduling requirements of one pod object.

    Equal requirements are returned as the same object, so the pods of one job share one
    value (cheap to compare and hash) and the parsing is done once per class, not per pod."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    try:
        fingerprint = _encode(
            (
                meta.get("namespace"),
                meta.get("labels"),
                priority < threshold,
                [
                    (c.get("resources", {}).get("requests"), c.get("ports"))
                    for c in spec.get("containers") or []
                    if isinstance(c, dict)
                ],
                [spec.get(f) for f in _SCHEDULING_FIELDS],
            )
        )
    except (TypeError, msgspec.EncodeError):
        return _parse_requirements(obj, priority, threshold)
    req = _interned.get(fingerprint)
    if req is None:
        req = _parse_requirements(obj, priority, threshold)
        if len(_interned) > 100_000:
            _interned.clear()
        _interned[fingerprint] = req
    return req


def _parse_requirements(obj: dict[str, Any], priority: int, threshold: int) -> Requirements:
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    namespace = str(meta.get("namespace", ""))
    cpu, mem, gpu = _requests(spec)
    aff = spec.get("affinity") or {}
    na = aff.get("nodeAffinity") or {}
    required_nodes = tuple(
        _node_term(t)
        for t in (na.get("requiredDuringSchedulingIgnoredDuringExecution") or {}).get(
            "nodeSelectorTerms"
        )
        or []
    )
    preferred_nodes = tuple(
        _node_term(p.get("preference") or {}, int(p.get("weight", 1)))
        for p in na.get("preferredDuringSchedulingIgnoredDuringExecution") or []
    )
    tolerations = tuple(
        Toleration(
            str(t.get("key", "")),
            str(t.get("operator", "Equal")),
            str(t.get("value", "")),
            str(t.get("effect", "")),
        )
        for t in spec.get("tolerations") or []
    )
    ports = sorted(
        {
            (str(p.get("protocol", "TCP")), int(p["hostPort"]))
            for c in spec.get("containers") or []
            for p in c.get("ports") or []
            if isinstance(p, dict) and p.get("hostPort")
        }
    )
    affinity, preferred_affinity = _pod_terms(aff, "podAffinity", namespace)
    anti, preferred_anti = _pod_terms(aff, "podAntiAffinity", namespace)
    spread = tuple(
        SpreadConstraint(
            max(1, int(c.get("maxSkew", 1))),
            str(c.get("topologyKey", "")),
            c.get("whenUnsatisfiable") != "ScheduleAnyway",
            _selector(c.get("labelSelector")),
            namespace,
        )
        for c in spec.get("topologySpreadConstraints") or []
    )
    labels = meta.get("labels") or {}
    return Requirements(
        namespace=namespace,
        labels=tuple(sorted(labels.items())),
        cpu_milli=cpu,
        memory_bytes=mem,
        gpu=gpu,
        batch=priority < threshold,
        node_selector=tuple(sorted((spec.get("nodeSelector") or {}).items())),
        required_node_terms=required_nodes,
        preferred_node_terms=preferred_nodes,
        tolerations=tolerations,
        host_ports=tuple(ports),
        affinity=affinity,
        anti_affinity=anti,
        preferred_affinity=preferred_affinity,
        preferred_anti_affinity=preferred_anti,
        spread=spread,
    )


def pod_info(
    obj: dict[str, Any],
    revision_row_version: int | None = None,
    threshold: int = PRODUCTION_THRESHOLD,
) -> PodInfo:
    """Parse a pod object (as the API renders it) into a :class:`PodInfo`.

    ``threshold`` is the lowest production priority: pods below it are batch (packed, filtered
    against batch-allocatable, preemptible); pods at or above it are never preempted."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    priority = spec.get("priority")
    prio = priority if isinstance(priority, int) else DEFAULT_PRIORITY
    owner = next(
        (
            o.get("uid")
            for o in meta.get("ownerReferences") or []
            if isinstance(o, dict) and o.get("controller")
        ),
        None,
    )
    condition = next(
        (
            (str(c.get("reason", "")), str(c.get("message", "")))
            for c in status.get("conditions") or []
            if isinstance(c, dict)
            and c.get("type") == "PodScheduled"
            and c.get("status") == "False"
        ),
        None,
    )
    created = _time(meta.get("creationTimestamp"))
    rv = revision_row_version
    if rv is None:
        try:
            rv = int(meta.get("resourceVersion") or 0)
        except ValueError:
            rv = 0
    return PodInfo(
        uid=str(meta.get("uid", "")),
        namespace=str(meta.get("namespace", "")),
        name=str(meta.get("name", "")),
        row_version=rv,
        priority=prio,
        created=created,
        labels=dict(meta.get("labels") or {}),
        owner_uid=owner,
        node_name=spec.get("nodeName") or None,
        phase=str(status.get("phase") or "Pending"),
        deleting=bool(meta.get("deletionTimestamp")),
        nominated_node=status.get("nominatedNodeName") or None,
        scheduler_name=str(spec.get("schedulerName") or "default-scheduler"),
        preempt_never=spec.get("preemptionPolicy") == "Never",
        grace_seconds=int(spec.get("terminationGracePeriodSeconds", DEFAULT_GRACE_SECONDS)),
        started=_time(status.get("startTime")) or created,
        req=requirements_of(obj, prio, threshold),
        scheduled_condition=condition,
    )
