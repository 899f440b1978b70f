"""Scheduling constraints of a pod spec: tolerations, affinity and topology spread.

The scheduler reads these structures directly, so their *shape* is checked strictly (types,
operators, required keys, weights) even where the semantics are only loosely constrained.
"""

from __future__ import annotations

from app.core.admission._util import INT64_MAX, Errs, Obj, idx, sub
from app.core.admission.meta import check_selector
from app.core.labels import validate_label_value, validate_qualified_name

TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
NODE_SELECTOR_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")


def check_tolerations(e: Errs, spec: Obj, path: str) -> None:
    items = e.get_list(spec, "tolerations", path)
    for p, t in e.objects(items or [], sub(path, "tolerations")):
        key = e.get_str(t, "key", p)
        if key:
            e.each_error(sub(p, "key"), key, validate_qualified_name(key))
        op = e.get_enum(t, "operator", p, ("Exists", "Equal"), default="Equal")
        value = e.get_str(t, "value", p)
        if not key and op == "Equal":
            e.invalid(
                sub(p, "operator"),
                op,
                "operator must be Exists when `key` is empty, which means "
                '"match all values and all keys"',
            )
        if op == "Exists" and value:
            e.invalid(sub(p, "operator"), op, "value must be empty when `operator` is 'Exists'")
        if op == "Equal" and value:
            e.each_error(sub(p, "value"), value, validate_label_value(value))
        effect = e.get_enum(t, "effect", p, ("", *TAINT_EFFECTS))
        seconds = e.get_int(t, "tolerationSeconds", p, minimum=None, maximum=INT64_MAX)
        if seconds is not None and effect != "NoExecute":
            e.invalid(
                sub(p, "effect"),
                effect or "",
                "effect must be 'NoExecute' when `tolerationSeconds` is set",
            )


def check_node_selector_requirements(e: Errs, term: Obj, key: str, path: str) -> None:
    for p, req in e.objects(e.get_list(term, key, path) or [], sub(path, key)):
        k = e.get_str(req, "key", p, required=True)
        if k and key == "matchExpressions":
            e.each_error(sub(p, "key"), k, validate_qualified_name(k))
        op = e.get_enum(req, "operator", p, NODE_SELECTOR_OPERATORS, required=True)
        values = e.get_str_list(req, "values", p)
        vp = sub(p, "values")
        if op in ("In", "NotIn") and not req.get("values"):
            e.required(vp, "must be specified when `operator` is 'In' or 'NotIn'")
        elif op in ("Exists", "DoesNotExist") and values:
            e.forbidden(vp, "may not be specified when `operator` is 'Exists' or 'DoesNotExist'")
        elif op in ("Gt", "Lt") and values is not None:
            if len(values) != 1:
                e.required(vp, "must be specified single value when `operator` is 'Lt' or 'Gt'")
            elif not values[0].lstrip("-").isdigit():
                e.invalid(idx(vp, 0), values[0], "must be an integer for 'Gt' and 'Lt'")
        elif op in ("Gt", "Lt"):
            e.required(vp, "must be specified single value when `operator` is 'Lt' or 'Gt'")


def check_node_selector_term(e: Errs, term: Obj, path: str) -> None:
    check_node_selector_requirements(e, term, "matchExpressions", path)
    check_node_selector_requirements(e, term, "matchFields", path)


def check_weight(e: Errs, item: Obj, path: str) -> None:
    e.get_int(item, "weight", path, required=True, minimum=1, maximum=100)


def check_node_affinity(e: Errs, aff: Obj, path: str) -> None:
    na = e.get_obj(aff, "nodeAffinity", path)
    if na is None:
        return
    p = sub(path, "nodeAffinity")
    req = e.get_obj(na, "requiredDuringSchedulingIgnoredDuringExecution", p)
    if req is not None:
        rp = sub(p, "requiredDuringSchedulingIgnoredDuringExecution")
        terms = e.get_list(req, "nodeSelectorTerms", rp, required=True)
        if terms == []:
            e.required(sub(rp, "nodeSelectorTerms"), "must have at least one node selector term")
        for tp, term in e.objects(terms or [], sub(rp, "nodeSelectorTerms")):
            check_node_selector_term(e, term, tp)
    key = "preferredDuringSchedulingIgnoredDuringExecution"
    for pp, pref in e.objects(e.get_list(na, key, p) or [], sub(p, key)):
        check_weight(e, pref, pp)
        preference = e.get_obj(pref, "preference", pp, required=True)
        if preference is not None:
            check_node_selector_term(e, preference, sub(pp, "preference"))


def check_pod_affinity_term(e: Errs, term: Obj, path: str) -> None:
    check_selector(e, term, "labelSelector", path)
    check_selector(e, term, "namespaceSelector", path)
    e.get_str_list(term, "namespaces", path)
    key = e.get_str(term, "topologyKey", path, required=True)
    if key:
        e.each_error(sub(path, "topologyKey"), key, validate_qualified_name(key))


def check_pod_affinity(e: Errs, aff: Obj, which: str, path: str) -> None:
    pa = e.get_obj(aff, which, path)
    if pa is None:
        return
    p = sub(path, which)
    req = "requiredDuringSchedulingIgnoredDuringExecution"
    for tp, term in e.objects(e.get_list(pa, req, p) or [], sub(p, req)):
        check_pod_affinity_term(e, term, tp)
    pref = "preferredDuringSchedulingIgnoredDuringExecution"
    for wp, item in e.objects(e.get_list(pa, pref, p) or [], sub(p, pref)):
        check_weight(e, item, wp)
        affinity_term = e.get_obj(item, "podAffinityTerm", wp, required=True)
        if affinity_term is not None:
            check_pod_affinity_term(e, affinity_term, sub(wp, "podAffinityTerm"))


def check_affinity(e: Errs, spec: Obj, path: str) -> None:
    aff = e.get_obj(spec, "affinity", path)
    if aff is None:
        return
    p = sub(path, "affinity")
    check_node_affinity(e, aff, p)
    check_pod_affinity(e, aff, "podAffinity", p)
    check_pod_affinity(e, aff, "podAntiAffinity", p)


def check_topology_spread(e: Errs, spec: Obj, path: str) -> None:
    seen: set[tuple[str, str]] = set()
    key = "topologySpreadConstraints"
    for p, c in e.objects(e.get_list(spec, key, path) or [], sub(path, key)):
        e.get_int(c, "maxSkew", p, required=True, minimum=1)
        topology_key = e.get_str(c, "topologyKey", p, required=True)
        if topology_key:
            e.each_error(sub(p, "topologyKey"), topology_key, validate_qualified_name(topology_key))
        when = e.get_enum(
            c, "whenUnsatisfiable", p, ("DoNotSchedule", "ScheduleAnyway"), required=True
        )
        check_selector(e, c, "labelSelector", p)
        min_domains = e.get_int(c, "minDomains", p, minimum=1)
        if min_domains is not None and when == "ScheduleAnyway":
            e.invalid(
                sub(p, "minDomains"),
                min_domains,
                "can only be set when whenUnsatisfiable is DoNotSchedule",
            )
        e.get_str_list(c, "matchLabelKeys", p)
        e.get_enum(c, "nodeAffinityPolicy", p, ("Honor", "Ignore"))
        e.get_enum(c, "nodeTaintsPolicy", p, ("Honor", "Ignore"))
        if topology_key and when:
            if (topology_key, when) in seen:
                e.duplicate(f"{p}.{{topologyKey, whenUnsatisfiable}}", f"{topology_key}, {when}")
            seen.add((topology_key, when))
