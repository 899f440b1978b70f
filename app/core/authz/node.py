"""The node authorizer: what a node's own credential may do, decided from the object graph.

An agent authenticates as ``system:node:<name>`` in group ``system:nodes`` (its credential,
``app.store.bootstrap``). As Kubernetes' node authorizer does, this one allows a node only
what its agent needs, and only for objects related to that node:

- its Node: ``get``, ``create`` (the first join), ``update``/``patch`` of the object (the
  hostname label, the memory-pressure taint) and of ``status``; what it may change of the
  object is restricted further on admission (:func:`self_change`);
- its Lease in ``quaymaster-node-lease`` (``get``, ``create``, ``update``, ``patch``), and
  ``get``/``create`` of that namespace (the first agent of a cluster creates it);
- the pods bound to it (``spec.nodeName``): ``get``, ``delete`` (the agent confirms a
  finished deletion), ``update``/``patch`` of ``status``; ``list``/``watch`` of pods only
  with the field selector ``spec.nodeName=<node>``;
- the ConfigMaps and Secrets those pods reference (volumes, ``env``, ``envFrom``,
  ``imagePullSecrets``, projected sources): ``get``;
- in namespaces where it has pods: ``get``/``list``/``watch`` of Services (the pods' service
  environment variables) and ``create`` of Events (the eviction Events it records);
- its usage samples (``create`` of ``nodes/samples`` in ``metrics.quaymaster.io``), and
  ``create`` of ``tokenreviews`` (the agent's log server checks who calls it).

Everything else gets "no opinion", so other authorizers (RBAC) may still allow it; a node
credential holds no RBAC bindings. Pure: the graph comes in as a :class:`NodeGraph`, built by
the API server from its watch cache (``app.api.nodegraph``), so a pod bound a moment ago is
readable as soon as the cache shows it and one unbound or deleted stops being readable then.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Set
from typing import Any, Protocol

from app.core.authz import ALLOW, NO_OPINION, Attributes, Decision
from app.core.kinds import GROUP

NODES_GROUP = "system:nodes"
NODE_PREFIX = "system:node:"
LEASE_NAMESPACE = "quaymaster-node-lease"
METRICS_GROUP = f"metrics.{GROUP}"
AUTHN_GROUP = f"authentication.{GROUP}"
CONFIG_MAP, SECRET = "ConfigMap", "Secret"
Ref = tuple[str, str]  # (kind, name): ("Secret", "db-password")

_READ = frozenset({"get"})
_OWN_NODE = frozenset({"get", "create", "update", "patch"})
_LEASE = frozenset({"get", "create", "update", "patch"})
_POD_OBJECT = frozenset({"get", "delete"})
_WRITE = frozenset({"update", "patch"})
_SERVICE = frozenset({"get", "list", "watch"})
# Label domains (and their subdomains) only administrators set on a Node: what they steer
# workloads with. A node may not add, change or remove such a label on its own Node.
RESTRICTED_LABEL_DOMAINS = (
    f"node-restriction.{GROUP}",  # node-restriction.quaymaster.io/...: Kubernetes' convention
    "node-role.kubernetes.io",  # roles: placement of control-plane and dedicated workloads
    f"node-role.{GROUP}",
)
# The taints a node adds and removes itself (``agent.pressure.TAINT_KEY``); every other taint
# is its administrators' and controllers' (unreachable, repair, dedicated nodes).
OWN_TAINTS = frozenset({f"node.{GROUP}/memory-pressure"})


class Principal(Protocol):
    """Who asks: ``app.store.tokens.User`` or anything with its two fields."""

    @property
    def name(self) -> str: ...

    @property
    def groups(self) -> tuple[str, ...]: ...


class NodeGraph(Protocol):
    """What the authorizer asks of the cluster's state."""

    def pod_node(self, namespace: str, name: str) -> str | None:
        """The node a pod is bound to; None if there is no such pod or it is unbound."""

    def has_pods(self, node: str, namespace: str) -> bool:
        """Whether any pod in ``namespace`` is bound to ``node``."""

    def references(self, node: str, namespace: str) -> Set[Ref]:
        """The ConfigMaps and Secrets that pods of ``node`` in ``namespace`` reference."""


def node_of(user: Principal) -> str | None:
    """The node a principal speaks for, or None if it is not a node's credential."""
    if NODES_GROUP not in user.groups or not user.name.startswith(NODE_PREFIX):
        return None
    name = user.name[len(NODE_PREFIX) :]
    return name or None


def pods_selector(node: str) -> str:
    """The field selector a node's pod list or watch must carry."""
    return f"spec.nodeName={node}"


def authorize(user: Principal, attrs: Attributes, graph: NodeGraph) -> Decision:
    """Allow what ``user``'s node may do; no opinion on anything else (see the module)."""
    node = node_of(user)
    if node is None:
        return NO_OPINION
    allowed = _allowed(node, attrs, graph)
    return ALLOW if allowed else Decision(False, f"no relationship found to node {node!r}")


def _allowed(node: str, a: Attributes, graph: NodeGraph) -> bool:
    if a.group == METRICS_GROUP:
        return (
            a.resource == "nodes"
            and a.subresource == "samples"
            and a.name == node
            and (a.verb == "create")
        )
    if a.group == AUTHN_GROUP:
        return a.resource == "tokenreviews" and a.verb == "create" and not a.subresource
    if a.group != GROUP:
        return False
    check = _RESOURCES.get(a.resource)
    return check is not None and check(node, a, graph)


def _named(a: Attributes, name: str) -> bool:
    """``a`` names ``name``, or is a create (whose name is in the body, which
    :func:`admission_refusal` checks once it is decoded)."""
    return a.name == name or (a.verb == "create" and not a.name)


def _node(node: str, a: Attributes, graph: NodeGraph) -> bool:
    if a.subresource == "status":
        return a.name == node and a.verb in _WRITE | _READ
    return not a.subresource and _named(a, node) and a.verb in _OWN_NODE


def _lease(node: str, a: Attributes, graph: NodeGraph) -> bool:
    return (
        a.namespace == LEASE_NAMESPACE
        and _named(a, node)
        and not a.subresource
        and a.verb in _LEASE
    )


def _namespace(node: str, a: Attributes, graph: NodeGraph) -> bool:
    return _named(a, LEASE_NAMESPACE) and not a.subresource and a.verb in ("get", "create")


def _pod(node: str, a: Attributes, graph: NodeGraph) -> bool:
    if a.verb in ("list", "watch"):
        # Attributes carry no selector: the list handler refuses a node's pod list or watch
        # that does not name its node (:func:`selector_refusal`), whoever allowed it.
        return not a.name and not a.subresource
    if not a.name or graph.pod_node(a.namespace, a.name) != node:
        return False
    if a.subresource == "status":
        return a.verb in _WRITE | _READ
    return not a.subresource and a.verb in _POD_OBJECT


def _selects_node(selector: str, node: str) -> bool:
    """Whether a field selector confines a list to ``node``'s pods."""
    terms = {t.strip().replace("==", "=") for t in selector.split(",") if t.strip()}
    return pods_selector(node) in terms


def _source(kind: str) -> Any:
    def check(node: str, a: Attributes, graph: NodeGraph) -> bool:
        if a.verb != "get" or a.subresource or not a.name:
            return False
        return (kind, a.name) in graph.references(node, a.namespace)

    return check


def _service(node: str, a: Attributes, graph: NodeGraph) -> bool:
    return a.verb in _SERVICE and not a.subresource and graph.has_pods(node, a.namespace)


def _event(node: str, a: Attributes, graph: NodeGraph) -> bool:
    return a.verb == "create" and not a.subresource and graph.has_pods(node, a.namespace)


_RESOURCES = {
    "nodes": _node,
    "leases": _lease,
    "namespaces": _namespace,
    "pods": _pod,
    "configmaps": _source(CONFIG_MAP),
    "secrets": _source(SECRET),
    "services": _service,
    "events": _event,
}


def selector_refusal(
    user: Principal, resource: str, selector: str | None, group: str = GROUP
) -> str | None:
    """Why a list or watch of ``resource`` by ``user`` with ``selector`` is refused (None: this
    authorizer has nothing against it): a node lists and watches only its own pods, so its
    pod lists must carry ``spec.nodeName=<node>``. The list handler calls this with the
    request's field selector, whichever authorizer allowed the list."""
    node = node_of(user)
    if node is None or group != GROUP or resource != "pods" or _selects_node(selector or "", node):
        return None
    return (
        f'pods is forbidden: User "{user.name}" may list and watch only the pods of its node: '
        f"the request must carry fieldSelector={pods_selector(node)}"
    )


def admission_refusal(
    user: Principal, kind: str, obj: Mapping[str, Any], old: Mapping[str, Any] | None = None
) -> str | None:
    """Why a node may not store ``obj`` (None: nothing against it). A create's attributes
    carry no name, so the authorizer lets a node create Nodes, Leases and the lease namespace;
    this check, run on the decoded object before it is stored, keeps each node to its own (as
    Kubernetes' NodeRestriction admission does). Of its own Node (``old``: the stored object
    an update replaces, None for a create) it may not change what :func:`self_change` names."""
    node = node_of(user)
    if node is None:
        return None
    meta = obj.get("metadata") or {}
    name, namespace = meta.get("name"), meta.get("namespace") or ""
    own = {
        "Node": name == node,
        "Lease": name == node and namespace == LEASE_NAMESPACE,
        "Namespace": name == LEASE_NAMESPACE,
    }.get(kind, True)
    if not own:
        return (
            f'{kind} "{name}" is forbidden: User "{user.name}" may write only its own node\'s '
            f"{kind}"
        )
    if kind != "Node":
        return None
    change = self_change(obj, old)
    if change is None:
        return None
    field, why = change
    return f'Node "{name}" is forbidden: User "{user.name}" may not change {field}: {why}'


def restricted_label(key: str) -> bool:
    """Whether a label key is in a domain only administrators set on Nodes."""
    domain = key.split("/", 1)[0] if "/" in key else ""
    return any(domain == d or domain.endswith("." + d) for d in RESTRICTED_LABEL_DOMAINS)


def self_change(obj: Mapping[str, Any], old: Mapping[str, Any] | None) -> tuple[str, str] | None:
    """The first change (field, why) a node may not make to its own Node, writing ``obj`` over
    ``old`` (None: creating it); None if it may. Restricted labels
    (:data:`RESTRICTED_LABEL_DOMAINS`) may be neither set at creation nor added, changed or
    removed later; after creation the spec is the administrators' and the controllers'
    (``unschedulable``, taints, pod CIDRs, provider id), except the node's own taints
    (:data:`OWN_TAINTS`). Status is a subresource of its own and not checked here."""
    labels = _mapping((obj.get("metadata") or {}).get("labels"))
    before = _mapping(((old or {}).get("metadata") or {}).get("labels"))
    for key in sorted(set(labels) | set(before)):
        if labels.get(key) != before.get(key) and restricted_label(key):
            return (
                f"metadata.labels[{key}]",
                "labels under "
                + ", ".join(f"{d}/" for d in RESTRICTED_LABEL_DOMAINS)
                + " are set by the cluster's administrators, not by the node",
            )
    if old is None:
        return None
    spec, was = _mapping(obj.get("spec")), _mapping(old.get("spec"))
    if bool(spec.get("unschedulable")) != bool(was.get("unschedulable")):
        return (
            "spec.unschedulable",
            "cordoning and uncordoning a node is for its administrators (qm cordon, drain)",
        )
    theirs, had = _others_taints(spec.get("taints")), _others_taints(was.get("taints"))
    if theirs != had:
        changed = sorted({t.get("key") for t in _parsed(theirs ^ had)} - {None}, key=str)
        return (
            f"spec.taints[{', '.join(str(k) for k in changed) or '?'}]",
            "a node adds and removes only its own taints ("
            + ", ".join(sorted(OWN_TAINTS))
            + "); the others are its administrators' and controllers'",
        )
    for key in sorted(set(spec) | set(was)):
        if key not in ("unschedulable", "taints") and _value(spec.get(key)) != _value(was.get(key)):
            return (f"spec.{key}", "a node's spec is its administrators' and controllers'")
    return None


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _value(value: Any) -> Any:
    """Absent, null and empty compare equal (admission drops nulls, stores an empty spec)."""
    return None if value in (None, "", [], {}) else value


def _others_taints(taints: Any) -> frozenset[str]:
    """The taints of ``taints`` that are not the node's own, as a set of canonical texts."""
    items = taints if isinstance(taints, list) else []
    return frozenset(
        json.dumps(t, sort_keys=True)
        for t in items
        if not (isinstance(t, Mapping) and t.get("key") in OWN_TAINTS)
    )


def _parsed(texts: Iterable[str]) -> list[Mapping[str, Any]]:
    out = []
    for text in texts:
        value = json.loads(text)
        out.append(value if isinstance(value, Mapping) else {})
    return out


# -- the graph's pure part: what a pod references ---------------------------------------------


def references(pod: Mapping[str, Any]) -> set[Ref]:
    """Every ConfigMap and Secret a pod names: its containers' ``env`` and ``envFrom``, its
    volumes (``configMap``, ``secret``, ``projected`` sources) and ``imagePullSecrets``."""
    spec = pod.get("spec") or {}
    out: set[Ref] = set()
    for c in _containers(spec):
        for var in _dicts(c.get("env")):
            source = var.get("valueFrom") or {}
            _add(out, CONFIG_MAP, source.get("configMapKeyRef"), "name")
            _add(out, SECRET, source.get("secretKeyRef"), "name")
        for src in _dicts(c.get("envFrom")):
            _add(out, CONFIG_MAP, src.get("configMapRef"), "name")
            _add(out, SECRET, src.get("secretRef"), "name")
    for vol in _dicts(spec.get("volumes")):
        _add(out, CONFIG_MAP, vol.get("configMap"), "name")
        _add(out, SECRET, vol.get("secret"), "secretName")
        for proj in _dicts((vol.get("projected") or {}).get("sources")):
            _add(out, CONFIG_MAP, proj.get("configMap"), "name")
            _add(out, SECRET, proj.get("secret"), "name")
    for ref in _dicts(spec.get("imagePullSecrets")):
        _add(out, SECRET, ref, "name")
    return out


def _containers(spec: Mapping[str, Any]) -> Iterable[Mapping[str, Any]]:
    for key in ("initContainers", "containers", "ephemeralContainers"):
        yield from _dicts(spec.get(key))


def _dicts(value: Any) -> list[Mapping[str, Any]]:
    return [v for v in value if isinstance(v, Mapping)] if isinstance(value, list) else []


def _add(out: set[Ref], kind: str, ref: Any, key: str) -> None:
    if isinstance(ref, Mapping) and isinstance(ref.get(key), str) and ref[key]:
        out.add((kind, ref[key]))
