"""The smaller kinds: PriorityClass, ResourceQuota, PodDisruptionBudget, Event, Node, Lease
and Namespace. Each has a handful of fields with simple rules, kept together here."""

from __future__ import annotations

import ipaddress

from app.core.admission._util import Errs, Obj, idx, sub
from app.core.admission.container import check_quantity_map
from app.core.admission.meta import check_selector
from app.core.admission.scheduling import TAINT_EFFECTS
from app.core.admission.values import check_int_or_percent, check_time
from app.core.labels import validate_label_value, validate_qualified_name
from app.core.priority import BANDS

PRIORITY_MIN = -(2**31)
PRIORITY_MAX_USER = 1_000_000_000
EVENT_MESSAGE_MAX = 4096
EVENT_REASON_MAX = 1024

QUOTA_RESOURCES = frozenset(
    {
        "cpu", "memory", "ephemeral-storage", "pods", "services", "configmaps", "secrets",
        "resourcequotas", "persistentvolumeclaims", "services.nodeports",
        "services.loadbalancers", "requests.cpu", "requests.memory",
        "requests.ephemeral-storage", "requests.storage", "limits.cpu", "limits.memory",
        "limits.ephemeral-storage",
    }
)  # fmt: skip
QUOTA_SCOPES = (
    "Terminating", "NotTerminating", "BestEffort", "NotBestEffort", "PriorityClass",
    "CrossNamespacePodAffinity", "PriorityBand",
)  # fmt: skip
# Scopes that take values; the others are yes/no and only allow Exists / DoesNotExist.
VALUED_SCOPES = ("PriorityClass", "PriorityBand")


def quota_name_errors(name: str) -> list[str]:
    if name in QUOTA_RESOURCES or name.startswith(("hugepages-", "requests.hugepages-")):
        return []
    if name.startswith("count/") and len(name) > len("count/"):
        return []
    rest = name.split(".", 1)[1] if name.startswith(("requests.", "limits.")) else name
    if "/" in rest:
        return validate_qualified_name(rest)
    return [
        "must be a standard quota resource (cpu, memory, pods, requests.cpu, limits.memory, "
        "count/<resource>, ...) or an extended resource such as nvidia.com/gpu or "
        "requests.nvidia.com/gpu"
    ]


def check_priorityclass(e: Errs, obj: Obj, old: Obj | None) -> None:
    value = e.get_int(
        obj, "value", "", required=True, minimum=PRIORITY_MIN, maximum=PRIORITY_MAX_USER
    )
    e.get_bool(obj, "globalDefault", "", default=False)
    e.get_str(obj, "description", "")
    policy = e.get_enum(
        obj,
        "preemptionPolicy",
        "",
        ("PreemptLowerPriority", "Never"),
        default="PreemptLowerPriority",
    )
    if old is not None:
        if value is not None and old.get("value") not in (None, value):
            e.immutable("value")
        if policy is not None and old.get("preemptionPolicy") not in (None, policy):
            e.immutable("preemptionPolicy")


def check_resourcequota(e: Errs, obj: Obj, old: Obj | None) -> None:
    spec = e.get_obj(obj, "spec", "", required=True)
    if spec is None:
        return
    hard = e.get_obj(spec, "hard", "spec")
    if hard is not None:
        # Only Python compares usage with these limits: no column holds them, so any size goes.
        check_quantity_map(e, hard, "spec.hard", quota_name_errors, stored=False)
    scopes = e.get_list(spec, "scopes", "spec")
    for i, scope in enumerate(scopes or []):
        if scope not in QUOTA_SCOPES:
            e.unsupported(idx("spec.scopes", i), scope, QUOTA_SCOPES)
    selector = e.get_obj(spec, "scopeSelector", "spec")
    if selector is None:
        return
    sp = "spec.scopeSelector"
    exprs = e.get_list(selector, "matchExpressions", sp)
    for ep, expr in e.objects(exprs or [], sub(sp, "matchExpressions")):
        scope = e.get_enum(expr, "scopeName", ep, QUOTA_SCOPES, required=True)
        op = e.get_enum(
            expr, "operator", ep, ("In", "NotIn", "Exists", "DoesNotExist"), required=True
        )
        values = e.get_str_list(expr, "values", ep)
        vp = sub(ep, "values")
        if scope is not None and scope not in VALUED_SCOPES and op in ("In", "NotIn"):
            e.invalid(
                sub(ep, "operator"), op, f"must be 'Exists' or 'DoesNotExist' for scope {scope}"
            )
        elif op in ("In", "NotIn") and not expr.get("values"):
            e.required(vp, "must be specified when `operator` is 'In' or 'NotIn'")
        elif op in ("Exists", "DoesNotExist") and values:
            e.forbidden(vp, "may not be specified when `operator` is 'Exists' or 'DoesNotExist'")
        if scope == "PriorityBand":
            for i, v in enumerate(values or []):
                if v not in BANDS:
                    e.unsupported(idx(vp, i), v, BANDS)


def check_pdb(e: Errs, obj: Obj, old: Obj | None) -> None:
    spec = e.get_obj(obj, "spec", "", required=True)
    if spec is None:
        return
    present = [k for k in ("minAvailable", "maxUnavailable") if spec.get(k) is not None]
    if not present:
        e.required("spec.minAvailable", "exactly one of minAvailable or maxUnavailable must be set")
    elif len(present) == 2:
        e.forbidden("spec.maxUnavailable", "minAvailable and maxUnavailable cannot be both set")
    for key in present:
        check_int_or_percent(e, spec, key, "spec", max_percent=True)
    check_selector(e, spec, "selector", "spec", required=True)
    e.get_enum(spec, "unhealthyPodEvictionPolicy", "spec", ("IfHealthyBudget", "AlwaysAllow"))


def check_event(e: Errs, obj: Obj, old: Obj | None) -> None:
    involved = e.get_obj(obj, "involvedObject", "", required=True)
    if involved is not None:
        for field in ("kind", "name"):
            e.get_str(involved, field, "involvedObject", required=True)
        for field in ("namespace", "uid", "apiVersion", "resourceVersion", "fieldPath"):
            e.get_str(involved, field, "involvedObject")
        meta = obj.get("metadata")
        namespace = meta.get("namespace") if isinstance(meta, dict) else None
        target = involved.get("namespace")
        if isinstance(target, str) and target and namespace and target != namespace:
            e.invalid("involvedObject.namespace", target, "does not match event.namespace")
    reason = e.get_str(obj, "reason", "")
    if reason is not None and len(reason) > EVENT_REASON_MAX:
        e.too_long("reason", EVENT_REASON_MAX)
    message = e.get_str(obj, "message", "")
    if message is not None and len(message) > EVENT_MESSAGE_MAX:
        e.too_long("message", EVENT_MESSAGE_MAX)
    e.get_enum(obj, "type", "", ("Normal", "Warning"), default="Normal")
    e.get_int(obj, "count", "", minimum=1, default=1)
    source = e.get_obj(obj, "source", "")
    if source is not None:
        e.get_str(source, "component", "source")
        e.get_str(source, "host", "source")
    check_time(e, obj, "firstTimestamp", "")
    check_time(e, obj, "lastTimestamp", "")
    e.get_str(obj, "reportingComponent", "")


# The node status maps the scheduler and the SQL helpers read amounts from: both must read the
# same value, so they hold quantities the database can store (numbers become quantity text).
NODE_AMOUNTS = ("capacity", "allocatable", "batchAllocatable")


def _any_resource_name(name: str) -> list[str]:
    return [] if name else ["must not be empty"]


def _cidr_error(text: str) -> str | None:
    try:
        ipaddress.ip_network(text, strict=False)
    except ValueError:
        return "must be a valid CIDR (e.g. 10.244.0.0/24)"
    return None if "/" in text else "must be a valid CIDR (e.g. 10.244.0.0/24)"


def check_node(e: Errs, obj: Obj, old: Obj | None) -> None:
    if obj.get("spec") is None:
        obj["spec"] = {}
    spec = e.get_obj(obj, "spec", "")
    if spec is not None:
        e.get_bool(spec, "unschedulable", "spec", default=False)
        seen: set[tuple[str, str]] = set()
        for tp, taint in e.objects(e.get_list(spec, "taints", "spec") or [], "spec.taints"):
            key = e.get_str(taint, "key", tp, required=True)
            if key:
                e.each_error(sub(tp, "key"), key, validate_qualified_name(key))
            value = e.get_str(taint, "value", tp)
            if value:
                e.each_error(sub(tp, "value"), value, validate_label_value(value))
            effect = e.get_enum(taint, "effect", tp, TAINT_EFFECTS, required=True)
            check_time(e, taint, "timeAdded", tp)
            if key and effect:
                if (key, effect) in seen:
                    e.duplicate(tp, f"{key}:{effect}")
                seen.add((key, effect))
        cidr = e.get_str(spec, "podCIDR", "spec")
        if cidr:
            problem = _cidr_error(cidr)
            if problem:
                e.invalid("spec.podCIDR", cidr, problem)
        for i, c in enumerate(e.get_str_list(spec, "podCIDRs", "spec") or []):
            problem = _cidr_error(c)
            if problem:
                e.invalid(idx("spec.podCIDRs", i), c, problem)
        e.get_str(spec, "providerID", "spec")
    status = obj.get("status")  # its type is checked for every kind by admit()
    for key in NODE_AMOUNTS:
        amounts = e.get_obj(status, key, "status") if isinstance(status, dict) else None
        if amounts is not None:
            check_quantity_map(e, amounts, sub("status", key), _any_resource_name)


def check_lease(e: Errs, obj: Obj, old: Obj | None) -> None:
    if obj.get("spec") is None:
        obj["spec"] = {}
    spec = e.get_obj(obj, "spec", "")
    if spec is None:
        return
    e.get_str(spec, "holderIdentity", "spec")
    e.get_int(spec, "leaseDurationSeconds", "spec", minimum=1)
    check_time(e, spec, "acquireTime", "spec")
    check_time(e, spec, "renewTime", "spec")
    e.get_int(spec, "leaseTransitions", "spec", minimum=0)
    e.get_str(spec, "preferredHolder", "spec")
    e.get_str(spec, "strategy", "spec")


def check_namespace(e: Errs, obj: Obj, old: Obj | None) -> None:
    spec = e.get_obj(obj, "spec", "")
    if spec is not None:
        finalizers = e.get_str_list(spec, "finalizers", "spec")
        for i, f in enumerate(finalizers or []):
            e.each_error(idx("spec.finalizers", i), f, validate_qualified_name(f))
    if obj.get("status") is None:
        obj["status"] = {}
    status = e.get_obj(obj, "status", "")
    if status is not None:
        e.get_enum(status, "phase", "status", ("Active", "Terminating"), default="Active")
